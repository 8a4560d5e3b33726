package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/turnlog/turnlog/internal/store"
)

// opens counts the stores a Buckets opened, by URL: its Guard is called
// once for each.
type opens struct {
	mu    sync.Mutex
	byURL map[string]int
}

func (o *opens) guard(url string) store.GuardOptions {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byURL == nil {
		o.byURL = map[string]int{}
	}
	o.byURL[url]++
	return store.GuardOptions{Name: "store at " + url}
}

func (o *opens) of(url string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byURL[url]
}

// Runs that start at once on the same stores share one bucket per URL,
// opened once: what one writes, another reads, and a mem:// store is not
// opened empty a second time.
func TestBucketsOpenEachURLOnce(t *testing.T) {
	ctx := context.Background()
	var o opens
	buckets := store.NewBuckets(store.BucketsOptions{Guard: o.guard})
	t.Cleanup(func() { _ = buckets.Close() })
	urls := []string{"mem://", "file://" + t.TempDir()}

	const callers = 16
	got := make([][]store.Bucket, len(urls))
	for i := range got {
		got[i] = make([]store.Bucket, callers)
	}
	var wg sync.WaitGroup
	for c := range callers {
		for i, url := range urls {
			wg.Go(func() {
				b, err := buckets.Bucket(ctx, url)
				if err != nil {
					t.Errorf("%s: %v", url, err)
				}
				got[i][c] = b
			})
		}
	}
	wg.Wait()
	for i, url := range urls {
		if n := o.of(url); n != 1 {
			t.Errorf("%s opened %d times, want once", url, n)
		}
		if err := got[i][0].Put(ctx, "k", []byte(url), nil); err != nil {
			t.Fatal(err)
		}
		for c, b := range got[i] {
			if data, err := b.Get(ctx, "k"); err != nil || string(data) != url {
				t.Errorf("%s, caller %d: read %q, %v; want what caller 0 wrote", url, c, data, err)
			}
		}
	}
	if got[0][0] == got[1][0] {
		t.Error("two URLs share one bucket")
	}
}

// Close closes every store opened so far, and a store asked for after it
// is opened again.
func TestBucketsCloseClosesAll(t *testing.T) {
	ctx := context.Background()
	var o opens
	buckets := store.NewBuckets(store.BucketsOptions{Guard: o.guard})
	urls := []string{"mem://", "file://" + t.TempDir()}
	var opened []store.Bucket
	for _, url := range urls {
		b, err := buckets.Bucket(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, "k", []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
		opened = append(opened, b)
	}
	if err := buckets.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, b := range opened {
		if _, err := b.Get(ctx, "k"); err == nil {
			t.Errorf("%s still answers after Close", urls[i])
		}
	}
	again, err := buckets.Bucket(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = buckets.Close() })
	if n := o.of("mem://"); n != 2 {
		t.Errorf("mem:// opened %d times after Close, want 2", n)
	}
	if _, err := again.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("mem:// opened again holds the closed one's object: %v", err)
	}
}

// A store that fails to open is not kept: once the cause is gone, it
// opens.
func TestBucketsFailedOpenIsNotKept(t *testing.T) {
	ctx := context.Background()
	var o opens
	buckets := store.NewBuckets(store.BucketsOptions{Guard: o.guard})
	t.Cleanup(func() { _ = buckets.Close() })
	dir := filepath.Join(t.TempDir(), "not-yet")
	url := "file://" + dir
	if _, err := buckets.Bucket(ctx, url); err == nil {
		t.Fatal("a store in a missing directory opened")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := buckets.Bucket(ctx, url)
	if err != nil {
		t.Fatalf("once the directory exists: %v", err)
	}
	if err := b.Put(ctx, "k", []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	if n := o.of(url); n != 1 {
		t.Errorf("guarded %d times, want once: only the open that worked", n)
	}
}

// Wrap sees each store behind its breaker, so that what it counts
// includes the requests the breaker refuses, and callers get what Wrap
// made.
func TestBucketsWrapOutsideTheBreaker(t *testing.T) {
	type wrapped struct{ store.Bucket }
	var inner []store.Bucket
	buckets := store.NewBuckets(store.BucketsOptions{Wrap: func(b store.Bucket) store.Bucket {
		inner = append(inner, b)
		return wrapped{b}
	}})
	t.Cleanup(func() { _ = buckets.Close() })
	b, err := buckets.Bucket(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(wrapped); !ok {
		t.Errorf("Bucket returned %T, not Wrap's bucket", b)
	}
	if len(inner) != 1 {
		t.Fatalf("Wrap called %d times, want once", len(inner))
	}
	if _, guarded := store.BreakerStateOf(inner[0]); !guarded {
		t.Errorf("Wrap was given %T, not the store behind its breaker", inner[0])
	}
}
