package controlplane

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/turnlog/turnlog/turnlogtest"
)

// Turnlog runs turnlog as `make dev` does — the controllers with local
// workers on a control plane from `make control-plane`, a file:// store,
// namespace default, a short poll — until the test ends. Without the
// control plane the test is skipped, except under CI=true.
func Turnlog(tb testing.TB, ctx context.Context) *turnlogtest.Env {
	tb.Helper()
	if !Available() && os.Getenv("CI") != "true" {
		tb.Skipf("no control plane in %s: run `make control-plane`", Assets())
	}
	tl, err := turnlogtest.New(ctx, turnlogtest.WithControlPlane(Assets()), turnlogtest.WithNamespaces("default"),
		turnlogtest.WithPollInterval(200*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := tl.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return tl
}
