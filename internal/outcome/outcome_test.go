package outcome

import (
	"errors"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestResult: every outcome is a result or an error, never both, and
// only Failed is terminal.
func TestResult(t *testing.T) {
	boom := errors.New("store timed out")
	for _, c := range []struct {
		name     string
		o        Outcome
		after    time.Duration
		err      error
		terminal bool
	}{
		{"waiting", Wait(3 * time.Second), 3 * time.Second, nil, false},
		{"waiting for a change only", Wait(0), 0, nil, false},
		{"stalled", Stall(time.Hour), time.Hour, nil, false},
		{"transient", Retry(boom), 0, boom, false},
		{"retry without an error is no failure", Retry(nil), 0, nil, false},
		{"failed", Fail(boom), 0, boom, true},
		{"transient without a cause still fails", Outcome{Kind: Transient}, 0, errNoCause, false},
		{"failed without a cause", Outcome{Kind: Failed}, 0, errNoCause, true},
	} {
		res, err := c.o.Result()
		if res.RequeueAfter != c.after || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%s: %v, %v; want RequeueAfter %s and error %v", c.name, res, err, c.after, c.err)
		}
		if err != nil && !res.IsZero() {
			t.Errorf("%s: a result (%v) together with an error", c.name, res)
		}
		if got := errors.Is(err, reconcile.TerminalError(nil)); got != c.terminal {
			t.Errorf("%s: terminal %v, want %v", c.name, got, c.terminal)
		}
	}
}
