package sessionlog

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/store"
)

// fakeClock is virtual time for budgets: Sleep moves it on and returns at
// once, and records how long it was asked to wait.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	return nil
}

// slept returns the number of sleeps and their total.
func (c *fakeClock) slept() (int, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var total time.Duration
	for _, d := range c.sleeps {
		total += d
	}
	return len(c.sleeps), total
}

// useFakeClock makes budgets wait on a fake clock that starts now, for
// the rest of the test.
func useFakeClock(t *testing.T) *fakeClock {
	t.Helper()
	was := clock
	c := &fakeClock{now: time.Now()}
	clock = c
	t.Cleanup(func() { clock = was })
	return c
}

// downBucket is a mem:// bucket whose listings, creates and attributes
// requests fail as unavailable while the test says so, counting every
// request of those kinds. With landThenFail a failing create stores its
// object first: the answer was lost, not the write. (sessionlog_test's
// failingReads is in the external test package, out of reach of a test
// that replaces clock.)
type downBucket struct {
	store.Bucket
	mu                           sync.Mutex
	listDown, putDown, attrsDown error
	landThenFail                 bool
	lists, puts, attrs           int
}

func newDownBucket(t *testing.T) *downBucket {
	t.Helper()
	b, err := store.Open(context.Background(), "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &downBucket{Bucket: b}
}

func (b *downBucket) List(ctx context.Context, prefix string) iter.Seq2[store.Object, error] {
	b.mu.Lock()
	b.lists++
	err := b.listDown
	b.mu.Unlock()
	if err != nil {
		return func(yield func(store.Object, error) bool) {
			yield(store.Object{}, fmt.Errorf("list %q: %w", prefix, err))
		}
	}
	return b.Bucket.List(ctx, prefix)
}

func (b *downBucket) PutIfAbsent(ctx context.Context, key string, data []byte, md map[string]string) error {
	b.mu.Lock()
	b.puts++
	err, land := b.putDown, b.landThenFail
	b.mu.Unlock()
	if err == nil {
		return b.Bucket.PutIfAbsent(ctx, key, data, md)
	}
	if land {
		if perr := b.Bucket.PutIfAbsent(ctx, key, data, md); perr != nil {
			return perr
		}
	}
	return fmt.Errorf("create %q: %w", key, err)
}

func (b *downBucket) Attributes(ctx context.Context, key string) (store.Attributes, error) {
	b.mu.Lock()
	b.attrs++
	err := b.attrsDown
	b.mu.Unlock()
	if err != nil {
		return store.Attributes{}, fmt.Errorf("attributes %q: %w", key, err)
	}
	return b.Bucket.Attributes(ctx, key)
}

func retryLog(t *testing.T, b store.Bucket) *Log {
	t.Helper()
	lg, err := New(b).Log(Location{Namespace: "default", Session: "retry", UID: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	return lg
}

var (
	errDown     = fmt.Errorf("connection refused: %w", store.ErrUnavailable)
	errSlow     = fmt.Errorf("timeout awaiting response headers: %w", store.ErrTimeout)
	errConflict = fmt.Errorf("ConditionalRequestConflict: %w", store.ErrConflict)
)

// Each kind of failure has its own number of tries: a dead store is given
// up on after unavailableAttempts, racing writers after attempts, a store
// whose breaker is open at once; an answer (not found) is not retried.
func TestRetryBudgetBounds(t *testing.T) {
	circuitOpen := &store.OpenCircuitError{Store: "logs", Since: time.Now(), Failures: 5, Last: errDown}
	for _, c := range []struct {
		name      string
		fail      func(try int) error
		tries     int
		wantErr   error // nil: success
		giveUpMsg bool
	}{
		{"unavailable", func(int) error { return errDown }, 5, store.ErrUnavailable, true},
		{"timeout", func(int) error { return errSlow }, 5, store.ErrTimeout, true},
		{"conflict", func(int) error { return errConflict }, 20, store.ErrConflict, true},
		{"circuit open", func(int) error { return circuitOpen }, 1, store.ErrCircuitOpen, false},
		{"not found", func(int) error { return store.ErrNotFound }, 1, store.ErrNotFound, false},
		// Conflicts do not spend the unavailable budget: the fifth
		// unavailable failure is the tenth try.
		{"conflict and unavailable by turns", func(try int) error {
			if try%2 == 1 {
				return errConflict
			}
			return errDown
		}, 10, store.ErrUnavailable, true},
		// A store that comes back on the last try allowed is heard.
		{"unavailable four times", func(try int) error {
			if try < 5 {
				return errDown
			}
			return nil
		}, 5, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			fc := useFakeClock(t)
			tries := 0
			err := retry(context.Background(), func() error {
				tries++
				return c.fail(tries)
			})
			if tries != c.tries {
				t.Errorf("%d tries, want %d", tries, c.tries)
			}
			switch {
			case c.wantErr == nil && err != nil:
				t.Fatalf("retry = %v, want success", err)
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Fatalf("retry = %v, want %v", err, c.wantErr)
			}
			if want := fmt.Sprintf("giving up after %d tries", c.tries); c.giveUpMsg && !strings.Contains(err.Error(), want) {
				t.Errorf("retry = %q, want it to say %q", err, want)
			}
			if n, _ := fc.slept(); n != c.tries-1 {
				t.Errorf("slept %d times between %d tries, want %d", n, c.tries, c.tries-1)
			}
		})
	}
}

// A dead store costs its caller well under a second of waiting before it
// hears so.
func TestRetryBudgetWaitsLittleOnADeadStore(t *testing.T) {
	for range 50 { // the backoff is random
		fc := useFakeClock(t)
		_ = retry(context.Background(), func() error { return errDown })
		n, total := fc.slept()
		if n != 4 || total >= time.Second {
			t.Fatalf("5 tries on a dead store slept %d times, %v in all; want 4, under a second", n, total)
		}
	}
}

// No retry starts if its backoff would end past the caller's deadline:
// the caller hears the last failure before its deadline, not at it.
func TestRetryBudgetStopsBeforeTheDeadline(t *testing.T) {
	t.Run("300ms", func(t *testing.T) {
		fc := useFakeClock(t)
		deadline := fc.Now().Add(300 * time.Millisecond)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		tries := 0
		err := retry(ctx, func() error {
			tries++
			if fc.Now().After(deadline) {
				t.Errorf("try %d started at virtual %v, past the deadline", tries, fc.Now().Sub(deadline))
			}
			return errConflict
		})
		if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "past the deadline") {
			t.Fatalf("retry = %v, want the conflict, saying the next try would start past the deadline", err)
		}
		// 19 backoffs of up to 250 ms do not fit in 300 ms; the first
		// few (at most 3, 5, 9 ms) do.
		if tries < 2 || tries >= attempts {
			t.Fatalf("%d tries, want more than 1 and fewer than %d", tries, attempts)
		}
		if _, total := fc.slept(); total > 300*time.Millisecond || fc.Now().After(deadline) {
			t.Fatalf("slept %v in all, up to virtual %v past the deadline", total, fc.Now().Sub(deadline))
		}
	})
	t.Run("no time for any", func(t *testing.T) {
		fc := useFakeClock(t)
		ctx, cancel := context.WithDeadline(context.Background(), fc.Now().Add(500*time.Microsecond))
		defer cancel()
		tries := 0
		err := retry(ctx, func() error { tries++; return errDown })
		if tries != 1 || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "past the deadline") {
			t.Fatalf("%d tries, %v; want 1 try, whose failure says the next would start past the deadline", tries, err)
		}
		if n, _ := fc.slept(); n != 0 {
			t.Fatalf("slept %d times, want none", n)
		}
	})
}

// Listing a log's segments on a store whose listings fail gives up after
// unavailableAttempts listings.
func TestRetryBudgetOfListSegments(t *testing.T) {
	fc := useFakeClock(t)
	b := newDownBucket(t)
	b.listDown = errDown
	_, err := retryLog(t, b).Head(context.Background())
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "giving up after 5 tries") {
		t.Fatalf("Head = %v, want ErrUnavailable after 5 tries", err)
	}
	if b.lists != unavailableAttempts {
		t.Fatalf("Head listed %d times, want %d", b.lists, unavailableAttempts)
	}
	if n, _ := fc.slept(); n != unavailableAttempts-1 {
		t.Fatalf("slept %d times, want %d", n, unavailableAttempts-1)
	}
}

// An append whose creates keep failing as unavailable gives up after
// unavailableAttempts tries with ErrOutcomeUnknown (each may have landed);
// appending the same events again once the store is back stores them
// once.
func TestRetryBudgetOfAppend(t *testing.T) {
	ev := [][]byte{[]byte(`{"type":"turn/start","turn":1}`), []byte(`{"type":"turn/end","turn":1,"reason":"stop"}`)}
	t.Run("lost", func(t *testing.T) {
		fc := useFakeClock(t)
		b := newDownBucket(t)
		b.putDown = errDown
		lg := retryLog(t, b)
		a := lg.NewAppender("w")
		_, err := a.Append(context.Background(), ev...)
		if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Append = %v, want ErrOutcomeUnknown and ErrUnavailable", err)
		}
		if b.puts != unavailableAttempts {
			t.Fatalf("Append tried %d creates, want %d", b.puts, unavailableAttempts)
		}
		if n, _ := fc.slept(); n != unavailableAttempts-1 {
			t.Fatalf("slept %d times, want %d", n, unavailableAttempts-1)
		}
		b.putDown = nil
		if first, err := a.Append(context.Background(), ev...); first != 0 || err != nil {
			t.Fatalf("Append again = %d, %v; want seq 0", first, err)
		}
		if h, err := lg.Head(context.Background()); err != nil || h.Next != 2 {
			t.Fatalf("the log's next seq is %d (%v), want 2", h.Next, err)
		}
	})
	t.Run("answer lost", func(t *testing.T) {
		useFakeClock(t)
		b := newDownBucket(t)
		b.putDown, b.landThenFail = errDown, true
		lg := retryLog(t, b)
		first, err := lg.NewAppender("w").Append(context.Background(), ev...)
		if first != 0 || err != nil {
			t.Fatalf("Append whose first answer was lost = %d, %v; want seq 0 (its retry finds its own segment)", first, err)
		}
		if b.puts != 2 {
			t.Fatalf("Append tried %d creates, want 2", b.puts)
		}
		if h, err := lg.Head(context.Background()); err != nil || h.Next != 2 {
			t.Fatalf("the log's next seq is %d (%v), want 2", h.Next, err)
		}
	})
}

// Behind a Guard, the first operation on a dead store spends its budget
// and opens the breaker; the next fails at once, without a request or a
// wait.
func TestRetryBudgetStopsAtAnOpenBreaker(t *testing.T) {
	fc := useFakeClock(t)
	b := newDownBucket(t)
	b.attrsDown = errDown
	lg := retryLog(t, store.Guard(b, store.GuardOptions{Name: "logs", Failures: unavailableAttempts, OpenFor: time.Minute}))
	if _, err := lg.Grown(context.Background(), 0); !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrCircuitOpen) {
		t.Fatalf("Grown on a dead store = %v, want ErrUnavailable", err)
	}
	if b.attrs != unavailableAttempts {
		t.Fatalf("Grown sent %d requests, want %d", b.attrs, unavailableAttempts)
	}
	n, _ := fc.slept()
	_, err := lg.Grown(context.Background(), 0)
	if !errors.Is(err, store.ErrCircuitOpen) || !strings.Contains(err.Error(), `"logs"`) {
		t.Fatalf("Grown once the breaker is open = %v, want ErrCircuitOpen naming the store", err)
	}
	if b.attrs != unavailableAttempts {
		t.Fatalf("Grown sent %d more requests through an open breaker", b.attrs-unavailableAttempts)
	}
	if m, _ := fc.slept(); m != n {
		t.Fatalf("Grown slept %d times more behind an open breaker, want none", m-n)
	}
}
