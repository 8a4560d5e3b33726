package sessionlog_test

import (
	"testing"

	"github.com/turnlog/turnlog/internal/testutil/storetest"
)

// TestGrown: a log is seen to grow past a seq, whoever appended and however
// the appends were batched, with one request and no listing.
func TestGrown(t *testing.T) {
	b := storetest.NewCounting(storetest.Open(t, "file://"+t.TempDir(), nil))
	lg := openLog(t, b, loc)
	grown := func(next int64) bool {
		t.Helper()
		b.Reset()
		g, err := lg.Grown(ctx(t), next)
		if err != nil {
			t.Fatal(err)
		}
		if c := b.Counts(); c.Requests() != 1 || c.Attributes != 1 {
			t.Fatalf("Grown(%d) made requests %+v, want one attributes request", next, c)
		}
		return g
	}
	if grown(0) {
		t.Fatal("an empty log has grown past seq 0")
	}
	// Heads the log had: 0, 5 and 10 (two turns of 5 events, then one
	// event from another writer); it has grown past each of them.
	writeTurns(t, lg, 2, 3, false)
	other := lg.NewAppender("other")
	if _, err := other.Append(ctx(t), ev("turn/start", 3, "")); err != nil {
		t.Fatal(err)
	}
	for next, want := range map[int64]bool{0: true, 5: true, 10: true, 11: false, 1 << 40: false} {
		if got := grown(next); got != want {
			t.Errorf("Grown(%d) = %v, want %v", next, got, want)
		}
	}
	if _, err := lg.Grown(ctx(t), -1); err == nil {
		t.Error("Grown(-1) did not fail")
	}
}
