package sessionlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
)

// cancellingBucket cancels a context once it has deleted after objects:
// a store that answers every delete at once, and a deadline that passes
// meanwhile.
type cancellingBucket struct {
	store.Bucket
	after   int64
	deleted atomic.Int64
	cancel  context.CancelFunc
}

func (b *cancellingBucket) Delete(ctx context.Context, key string) error {
	if b.deleted.Add(1) == b.after {
		b.cancel()
	}
	return b.Bucket.Delete(ctx, key)
}

// TestDeleteStopsAtTheDeadline: deleting a root of many objects stops
// when its context ends, however fast each delete is, says how far it got,
// and leaves the rest for a later try.
func TestDeleteStopsAtTheDeadline(t *testing.T) {
	const objects = 2000
	mem := storetest.Open(t, "mem://", nil)
	loc := sessionlog.Location{Namespace: "team-a", Session: "big", UID: "0d9e"}
	root, _ := loc.Root()
	for i := range objects {
		if err := mem.Put(context.Background(), fmt.Sprintf("%sderived/x/%05d", root, i), []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &cancellingBucket{Bucket: mem, after: 100, cancel: cancel}
	n, err := sessionlog.New(b).Delete(ctx, loc, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Delete after its context ended: %d deleted, err %v; want context.Canceled", n, err)
	}
	if n < 99 || n > 120 {
		t.Fatalf("%d of %d objects deleted; want the deletes to stop right after the 100th", n, objects)
	}
	want := fmt.Sprintf("(%d of %d objects deleted)", n, objects)
	if got := err.Error(); !strings.Contains(got, want) {
		t.Fatalf("error %q does not say %q", got, want)
	}
	left := 0
	for _, err := range mem.List(context.Background(), root) {
		if err != nil {
			t.Fatal(err)
		}
		left++
	}
	// And the mark that says the log is being deleted, until it is gone.
	if left != objects-n+1 {
		t.Fatalf("%d objects left, want %d and the deleted mark", left, objects-n)
	}
	// A later try finishes the job.
	if n2, err := sessionlog.New(mem).Delete(context.Background(), loc, nil); err != nil || n2 != left-1 {
		t.Fatalf("second Delete: %d, %v; want %d, nil", n2, err, left-1)
	}
	for o := range mem.List(context.Background(), root) {
		t.Fatalf("%s left after the deletion completed", o.Key)
	}
}
