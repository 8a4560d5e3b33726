package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
)

// flakyBucket is a mem:// bucket whose requests fail as the test says:
// while err is set, every request fails with it (wrapped with the
// operation and key, as the real backends do) without touching the
// objects; readErr fails the Read of each range reader, listErr each
// listing after its first object. It counts the requests that reach it,
// and holds each one until hold, if set, is closed.
type flakyBucket struct {
	store.Bucket
	mu      sync.Mutex
	err     error
	readErr error
	listErr error
	hold    chan struct{}
	reached int
}

func newFlaky(t *testing.T) *flakyBucket {
	t.Helper()
	mem := storetest.Open(t, "mem://", nil)
	for _, k := range []string{"p/a", "p/b", "p/c", "k"} {
		if err := mem.Put(context.Background(), k, []byte("hello"), nil); err != nil {
			t.Fatal(err)
		}
	}
	return &flakyBucket{Bucket: mem}
}

func (f *flakyBucket) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *flakyBucket) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reached
}

// request is what every operation does first.
func (f *flakyBucket) request(op, key string) error {
	f.mu.Lock()
	f.reached++
	err, hold := f.err, f.hold
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if err != nil {
		return fmt.Errorf("%s %q: %w", op, key, err)
	}
	return nil
}

func (f *flakyBucket) Get(ctx context.Context, key string) ([]byte, error) {
	if err := f.request("get", key); err != nil {
		return nil, err
	}
	return f.Bucket.Get(ctx, key)
}

func (f *flakyBucket) Attributes(ctx context.Context, key string) (store.Attributes, error) {
	if err := f.request("attributes", key); err != nil {
		return store.Attributes{}, err
	}
	return f.Bucket.Attributes(ctx, key)
}

func (f *flakyBucket) PutIfAbsent(ctx context.Context, key string, data []byte, md map[string]string) error {
	if err := f.request("create", key); err != nil {
		return err
	}
	return f.Bucket.PutIfAbsent(ctx, key, data, md)
}

func (f *flakyBucket) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := f.request("read", key); err != nil {
		return nil, err
	}
	r, err := f.Bucket.NewRangeReader(ctx, key, offset, length)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	readErr := f.readErr
	f.mu.Unlock()
	if readErr != nil {
		return &failingReader{ReadCloser: r, err: fmt.Errorf("read %q: %w", key, readErr)}, nil
	}
	return r, nil
}

// failingReader is a range reader whose connection broke.
type failingReader struct {
	io.ReadCloser
	err error
}

func (r *failingReader) Read([]byte) (int, error) { return 0, r.err }

func (f *flakyBucket) List(ctx context.Context, prefix string) iter.Seq2[store.Object, error] {
	return func(yield func(store.Object, error) bool) {
		if err := f.request("list", prefix); err != nil {
			yield(store.Object{}, err)
			return
		}
		f.mu.Lock()
		listErr := f.listErr
		f.mu.Unlock()
		n := 0
		for o, err := range f.Bucket.List(ctx, prefix) {
			if listErr != nil && n == 1 {
				yield(store.Object{}, fmt.Errorf("list %q: %w", prefix, listErr))
				return
			}
			n++
			if !yield(o, err) {
				return
			}
		}
	}
}

// events records what a Guard tells its callbacks.
type events struct {
	mu       sync.Mutex
	kinds    []string
	states   []store.BreakerState
	lasts    []error
	badStore []string
}

func (e *events) options(name string, failures uint32, openFor time.Duration) store.GuardOptions {
	return store.GuardOptions{
		Name: name, Failures: failures, OpenFor: openFor,
		OnFailure: func(s, kind string) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.kinds = append(e.kinds, kind)
			if s != name {
				e.badStore = append(e.badStore, s)
			}
		},
		OnStateChange: func(s string, to store.BreakerState, last error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.states = append(e.states, to)
			e.lasts = append(e.lasts, last)
			if s != name {
				e.badStore = append(e.badStore, s)
			}
		},
	}
}

func (e *events) failures() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.kinds)
}

func (e *events) transitions() []store.BreakerState {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.states)
}

func unavailable(what string) error { return fmt.Errorf("%s: %w", what, store.ErrUnavailable) }

func stateOf(t *testing.T, b store.Bucket) store.BreakerState {
	t.Helper()
	s, ok := store.BreakerStateOf(b)
	if !ok {
		t.Fatal("BreakerStateOf: not a guarded bucket")
	}
	return s
}

// wantRefused checks err is a refusal of the open breaker of store name,
// whose last failure says last.
func wantRefused(t *testing.T, what string, err error, name, last string) {
	t.Helper()
	oc, ok := errors.AsType[*store.OpenCircuitError](err)
	switch {
	case !ok:
		t.Fatalf("%s = %v, want an *OpenCircuitError", what, err)
	case !errors.Is(err, store.ErrCircuitOpen) || !errors.Is(err, store.ErrUnavailable):
		t.Fatalf("%s = %v, want it to be ErrCircuitOpen and ErrUnavailable", what, err)
	case store.IsRetryable(err):
		t.Fatalf("%s = %v is retryable; the breaker decides when to try again", what, err)
	case oc.Store != name || !strings.Contains(err.Error(), `"`+name+`"`):
		t.Fatalf("%s = %q, want it to name the store %q", what, err, name)
	case !strings.Contains(err.Error(), last):
		t.Fatalf("%s = %q, want it to name the last failure %q", what, err, last)
	}
}

func getK(b store.Bucket) error {
	_, err := b.Get(context.Background(), "k")
	return err
}

// Exactly Failures unavailable requests in a row open the breaker; from
// then on every kind of request fails at once, without reaching the
// store, with an error that names the store and the failure that opened
// it.
func TestGuardOpensAfterFailuresInARow(t *testing.T) {
	ctx := context.Background()
	f := newFlaky(t)
	var ev events
	g := store.Guard(f, ev.options("eu-logs", 3, time.Minute))
	if s := stateOf(t, g); s != store.BreakerClosed {
		t.Fatalf("new breaker is %v, want closed", s)
	}
	for i := 1; i <= 3; i++ {
		f.fail(unavailable(fmt.Sprintf("node %d down", i)))
		err := getK(g)
		if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrCircuitOpen) {
			t.Fatalf("failure %d: %v, want the store's own ErrUnavailable", i, err)
		}
		want := store.BreakerClosed
		if i == 3 {
			want = store.BreakerOpen
		}
		if s := stateOf(t, g); s != want {
			t.Fatalf("after %d failures in a row the breaker is %v, want %v", i, s, want)
		}
	}
	if n := f.count(); n != 3 {
		t.Fatalf("%d requests reached the store, want 3", n)
	}

	f.fail(nil) // the store is back, but the breaker does not know yet
	_, getErr := g.Get(ctx, "k")
	_, attrErr := g.Attributes(ctx, "k")
	putErr := g.PutIfAbsent(ctx, "new", []byte("x"), nil)
	r, readErr := g.NewRangeReader(ctx, "k", 0, -1)
	if r != nil {
		t.Fatal("NewRangeReader of an open breaker returned a reader")
	}
	var listErrs []error
	for o, err := range g.List(ctx, "p/") {
		if err == nil {
			t.Fatalf("List of an open breaker yielded %q", o.Key)
		}
		listErrs = append(listErrs, err)
	}
	if len(listErrs) != 1 {
		t.Fatalf("List of an open breaker yielded %d errors, want 1", len(listErrs))
	}
	for what, err := range map[string]error{"Get": getErr, "Attributes": attrErr, "PutIfAbsent": putErr, "NewRangeReader": readErr, "List": listErrs[0]} {
		wantRefused(t, what+" while open", err, "eu-logs", "node 3 down")
	}
	if n := f.count(); n != 3 {
		t.Fatalf("%d requests reached the store, want still 3: an open breaker sends none", n)
	}
	if _, err := f.Bucket.Attributes(ctx, "new"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused PutIfAbsent wrote its object (%v)", err)
	}
	wantKinds := []string{"unavailable", "unavailable", "unavailable", "refused", "refused", "refused", "refused", "refused"}
	if got := ev.failures(); !slices.Equal(got, wantKinds) {
		t.Fatalf("OnFailure kinds = %v, want %v", got, wantKinds)
	}
	if got := ev.transitions(); !slices.Equal(got, []store.BreakerState{store.BreakerOpen}) {
		t.Fatalf("OnStateChange = %v, want [open]", got)
	}
	if len(ev.badStore) != 0 {
		t.Fatalf("callbacks were told of stores %v, want only eu-logs", ev.badStore)
	}
}

// With Failures unset, DefaultBreakerFailures failures in a row open it.
func TestGuardDefaultFailures(t *testing.T) {
	f := newFlaky(t)
	g := store.Guard(f, store.GuardOptions{Name: "s"})
	f.fail(unavailable("down"))
	for i := 1; i < store.DefaultBreakerFailures; i++ {
		_ = getK(g)
	}
	if s := stateOf(t, g); s != store.BreakerClosed {
		t.Fatalf("after %d failures the breaker is %v, want closed", store.DefaultBreakerFailures-1, s)
	}
	_ = getK(g)
	if s := stateOf(t, g); s != store.BreakerOpen {
		t.Fatalf("after %d failures the breaker is %v, want open", store.DefaultBreakerFailures, s)
	}
}

// Timeouts count as failures, reported as "timeout": the store's own
// (ErrTimeout), a deadline inside the client, and the caller's deadline
// passing while the store kept it waiting, whatever error that gave.
func TestGuardCountsTimeoutsAndDeadlines(t *testing.T) {
	f := newFlaky(t)
	var ev events
	opts := ev.options("s", 4, time.Minute)
	opts.Timeouts = 10 // only Failures counts here
	g := store.Guard(f, opts)
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()

	f.fail(fmt.Errorf("timeout awaiting response headers: %w", store.ErrTimeout))
	_ = getK(g)
	f.fail(context.DeadlineExceeded)
	_ = getK(g)
	f.fail(errors.New("request canceled while waiting"))
	if _, err := g.Get(expired, "k"); err == nil {
		t.Fatal("no error")
	}
	if s := stateOf(t, g); s != store.BreakerClosed {
		t.Fatalf("after 3 timeouts the breaker is %v, want closed", s)
	}
	f.fail(unavailable("connection refused"))
	_ = getK(g)
	if s := stateOf(t, g); s != store.BreakerOpen {
		t.Fatalf("after 3 timeouts and a failure the breaker is %v, want open", s)
	}
	wantRefused(t, "Get while open", getK(g), "s", "connection refused")
	want := []string{"timeout", "timeout", "timeout", "unavailable", "refused"}
	if got := ev.failures(); !slices.Equal(got, want) {
		t.Fatalf("OnFailure kinds = %v, want %v", got, want)
	}
}

// Requests that got no answer held their callers for the whole timeout:
// Timeouts of them in a row open the breaker, before Failures; a failure
// of another kind in between breaks that streak (not the other).
func TestGuardOpensAfterTimeoutsInARow(t *testing.T) {
	timeout := fmt.Errorf("timeout awaiting response headers: %w", store.ErrTimeout)
	t.Run("in a row", func(t *testing.T) {
		f := newFlaky(t)
		var ev events
		g := store.Guard(f, ev.options("s", 5, time.Minute)) // Timeouts: the default, 2
		f.fail(timeout)
		_ = getK(g)
		if s := stateOf(t, g); s != store.BreakerClosed {
			t.Fatalf("after 1 timeout the breaker is %v, want closed", s)
		}
		_ = getK(g)
		if s := stateOf(t, g); s != store.BreakerOpen {
			t.Fatalf("after 2 timeouts in a row the breaker is %v, want open", s)
		}
		err := getK(g)
		wantRefused(t, "Get while open", err, "s", "timeout awaiting response headers")
		if !strings.Contains(err.Error(), "2 requests in a row failed") {
			t.Fatalf("the refusal does not say how many failed: %v", err)
		}
	})
	t.Run("broken by another failure", func(t *testing.T) {
		f := newFlaky(t)
		var ev events
		g := store.Guard(f, ev.options("s", 5, time.Minute))
		for _, err := range []error{timeout, unavailable("connection refused"), timeout} {
			f.fail(err)
			_ = getK(g)
		}
		if s := stateOf(t, g); s != store.BreakerClosed {
			t.Fatalf("after a timeout, a refused connection and a timeout the breaker is %v, want closed", s)
		}
	})
}

// Answers of a store that works — not found, exists, conflict, a
// refusal, any other error, success — are not failures and end the
// streak: it takes Failures new failures in a row to open the breaker.
func TestGuardAnswersResetTheStreak(t *testing.T) {
	for _, answer := range []error{
		store.ErrNotFound, store.ErrExists, store.ErrConflict,
		&store.RefusedError{Op: "get", Key: "k", At: "k", Kind: "a symbolic link"},
		errors.New("AccessDenied: access denied"), nil,
	} {
		t.Run(fmt.Sprint(answer), func(t *testing.T) {
			f := newFlaky(t)
			var ev events
			g := store.Guard(f, ev.options("s", 3, time.Minute))
			f.fail(unavailable("down"))
			_, _ = getK(g), getK(g)
			f.fail(answer)
			err := getK(g)
			if answer != nil && !errors.Is(err, answer) {
				t.Fatalf("the answer came back as %v, want %v", err, answer)
			}
			if answer == nil && err != nil {
				t.Fatalf("the answer came back as %v, want success", err)
			}
			f.fail(unavailable("down"))
			_, _ = getK(g), getK(g)
			if s := stateOf(t, g); s != store.BreakerClosed {
				t.Fatalf("2 failures, an answer, 2 failures: the breaker is %v, want closed", s)
			}
			if got := len(ev.failures()); got != 4 {
				t.Fatalf("OnFailure told of %d failures (%v), want 4", got, ev.failures())
			}
			_ = getK(g)
			if s := stateOf(t, g); s != store.BreakerOpen {
				t.Fatalf("after 3 failures in a row the breaker is %v, want open", s)
			}
		})
	}
}

// A request whose caller gave up (context.Canceled) counts for nothing:
// it neither ends a streak of failures nor adds to it, and a cancelled
// probe leaves the way open for the next.
func TestGuardIgnoresCancelledRequests(t *testing.T) {
	f := newFlaky(t)
	var ev events
	g := store.Guard(f, ev.options("s", 3, 50*time.Millisecond))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	f.fail(unavailable("down"))
	_, _ = getK(g), getK(g)
	f.fail(context.Canceled)
	for range 5 {
		if _, err := g.Get(cancelled, "k"); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Get = %v", err)
		}
	}
	if s := stateOf(t, g); s != store.BreakerClosed {
		t.Fatalf("2 failures and 5 cancelled requests: the breaker is %v, want closed", s)
	}
	f.fail(unavailable("down"))
	_ = getK(g)
	if s := stateOf(t, g); s != store.BreakerOpen {
		t.Fatalf("2 failures, 5 cancelled requests, 1 failure: the breaker is %v, want open (the streak goes on)", s)
	}
	if got := ev.failures(); !slices.Equal(got, []string{"unavailable", "unavailable", "unavailable"}) {
		t.Fatalf("OnFailure kinds = %v, want 3 unavailable", got)
	}

	time.Sleep(70 * time.Millisecond)
	f.fail(context.Canceled)
	if _, err := g.Get(cancelled, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled probe = %v, want its own context.Canceled", err)
	}
	f.fail(nil)
	before := f.count()
	if err := getK(g); err != nil {
		t.Fatalf("the request after a cancelled probe = %v, want it sent as the probe", err)
	}
	if f.count() != before+1 {
		t.Fatal("the request after a cancelled probe did not reach the store")
	}
	if s := stateOf(t, g); s != store.BreakerClosed {
		t.Fatalf("after a successful probe the breaker is %v, want closed", s)
	}
}

// After OpenFor one request goes through as a probe while the others are
// refused; its success closes the breaker.
func TestGuardProbeSuccessCloses(t *testing.T) {
	f := newFlaky(t)
	var ev events
	g := store.Guard(f, ev.options("s", 1, 50*time.Millisecond))
	f.fail(unavailable("down"))
	_ = getK(g)
	wantRefused(t, "Get right after opening", getK(g), "s", "down")

	time.Sleep(70 * time.Millisecond)
	hold := make(chan struct{})
	f.mu.Lock()
	f.err, f.hold = nil, hold
	f.mu.Unlock()
	reached := f.count()
	probe := make(chan error, 1)
	go func() { probe <- getK(g) }()
	for deadline := time.Now().Add(time.Second); f.count() == reached; {
		if time.Now().After(deadline) {
			t.Fatal("the probe did not reach the store within a second")
		}
		time.Sleep(time.Millisecond)
	}
	if s := stateOf(t, g); s != store.BreakerHalfOpen {
		t.Fatalf("while the probe is out the breaker is %v, want half-open", s)
	}
	for i := range 3 {
		wantRefused(t, fmt.Sprintf("request %d while the probe is out", i), getK(g), "s", "down")
	}
	if n := f.count(); n != reached+1 {
		t.Fatalf("%d requests reached the store while one probe was out, want 1", n-reached)
	}
	f.mu.Lock()
	f.hold = nil
	f.mu.Unlock()
	close(hold)
	if err := <-probe; err != nil {
		t.Fatalf("probe: %v", err)
	}
	if s := stateOf(t, g); s != store.BreakerClosed {
		t.Fatalf("after a successful probe the breaker is %v, want closed", s)
	}
	for range 3 {
		if err := getK(g); err != nil {
			t.Fatalf("Get after the breaker closed: %v", err)
		}
	}
	want := []store.BreakerState{store.BreakerOpen, store.BreakerHalfOpen, store.BreakerClosed}
	if got := ev.transitions(); !slices.Equal(got, want) {
		t.Fatalf("OnStateChange = %v, want %v", got, want)
	}
	if last := ev.lasts[0]; last == nil || !strings.Contains(last.Error(), "down") {
		t.Fatalf("OnStateChange(open) was told the last failure was %v, want the one that opened it", last)
	}
	if got := ev.failures(); !slices.Equal(got, []string{"unavailable", "refused", "refused", "refused", "refused"}) {
		t.Fatalf("OnFailure kinds = %v", got)
	}
}

// A failed probe opens the breaker again for OpenFor, with the probe's
// failure as the last; the next probe's success closes it.
func TestGuardProbeFailureReopens(t *testing.T) {
	f := newFlaky(t)
	var ev events
	g := store.Guard(f, ev.options("s", 2, 50*time.Millisecond))
	f.fail(unavailable("first outage"))
	_, _ = getK(g), getK(g)
	time.Sleep(70 * time.Millisecond)
	f.fail(unavailable("still down"))
	if err := getK(g); !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrCircuitOpen) {
		t.Fatalf("probe = %v, want the store's failure", err)
	}
	if s := stateOf(t, g); s != store.BreakerOpen {
		t.Fatalf("after a failed probe the breaker is %v, want open", s)
	}
	reached := f.count()
	wantRefused(t, "Get after a failed probe", getK(g), "s", "still down")
	if f.count() != reached {
		t.Fatal("a request after a failed probe reached the store")
	}
	time.Sleep(70 * time.Millisecond)
	f.fail(nil)
	if err := getK(g); err != nil {
		t.Fatalf("second probe: %v", err)
	}
	want := []store.BreakerState{store.BreakerOpen, store.BreakerHalfOpen, store.BreakerOpen, store.BreakerHalfOpen, store.BreakerClosed}
	if got := ev.transitions(); !slices.Equal(got, want) {
		t.Fatalf("OnStateChange = %v, want %v", got, want)
	}
}

func listP(g store.Bucket, stopAfter int) (n int, err error) {
	for _, err := range g.List(context.Background(), "p/") {
		if err != nil {
			return n, err
		}
		if n++; n == stopAfter {
			break
		}
	}
	return n, nil
}

// A listing that fails after yielding objects counts as one failure; one
// that ends, or that its caller stops early, counts as success.
func TestGuardCountsAFailedListingOnce(t *testing.T) {
	f := newFlaky(t)
	var ev events
	g := store.Guard(f, ev.options("s", 2, time.Minute))
	f.listErr = unavailable("connection reset")
	n, err := listP(g, -1)
	if n != 1 || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("failing listing: %d objects, %v; want 1 and ErrUnavailable", n, err)
	}
	if got := ev.failures(); !slices.Equal(got, []string{"unavailable"}) {
		t.Fatalf("a failed listing was counted as %v, want one unavailable", got)
	}
	if s := stateOf(t, g); s != store.BreakerClosed {
		t.Fatalf("after one failed listing the breaker is %v, want closed", s)
	}

	f.listErr = nil
	if n, err := listP(g, -1); n != 3 || err != nil {
		t.Fatalf("listing: %d objects, %v; want 3", n, err)
	}
	f.listErr = unavailable("connection reset")
	_, _ = listP(g, -1)
	if n, err := listP(g, 1); n != 1 || err != nil { // stopped before the failure
		t.Fatalf("listing stopped after one object: %d, %v", n, err)
	}
	_, _ = listP(g, -1)
	if s := stateOf(t, g); s != store.BreakerClosed {
		t.Fatalf("failed, whole, failed, stopped, failed listings: the breaker is %v, want closed", s)
	}
	_, _ = listP(g, -1)
	if s := stateOf(t, g); s != store.BreakerOpen {
		t.Fatalf("after two failed listings in a row the breaker is %v, want open", s)
	}
	if got := len(ev.failures()); got != 4 {
		t.Fatalf("OnFailure told of %d failures, want 4 (one per failed listing)", got)
	}
}

// readK opens k, reads it to the end and closes it.
func readK(g store.Bucket) error {
	r, err := g.NewRangeReader(context.Background(), "k", 0, -1)
	if err != nil {
		return err
	}
	_, err = io.ReadAll(r)
	if cerr := r.Close(); err == nil {
		err = cerr
	}
	return err
}

// A range reader reports when its body fails (a connection broken
// mid-stream), once, however it is closed after; one read to the end and
// closed counts as success.
func TestGuardCountsReaders(t *testing.T) {
	t.Run("failures", func(t *testing.T) {
		f := newFlaky(t)
		g := store.Guard(f, store.GuardOptions{Name: "s", Failures: 2})
		f.readErr = unavailable("connection reset")
		if err := readK(g); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("read = %v, want ErrUnavailable", err)
		}
		if s := stateOf(t, g); s != store.BreakerClosed {
			t.Fatalf("after one failed read the breaker is %v, want closed", s)
		}
		_ = readK(g)
		if s := stateOf(t, g); s != store.BreakerOpen {
			t.Fatalf("after two failed reads, each closed, the breaker is %v, want open", s)
		}
	})
	t.Run("success", func(t *testing.T) {
		f := newFlaky(t)
		g := store.Guard(f, store.GuardOptions{Name: "s", Failures: 2})
		f.readErr = unavailable("connection reset")
		_ = readK(g)
		f.readErr = nil
		r, err := g.NewRangeReader(context.Background(), "k", 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		if data, err := io.ReadAll(r); string(data) != "hello" || err != nil {
			t.Fatalf("read %q, %v", data, err)
		}
		// Until it is closed the reader has not answered.
		f.readErr = unavailable("connection reset")
		_ = readK(g)
		if s := stateOf(t, g); s != store.BreakerOpen {
			t.Fatalf("a reader not yet closed ended the streak: the breaker is %v, want open", s)
		}
		_ = r.Close()

		f2 := newFlaky(t)
		g2 := store.Guard(f2, store.GuardOptions{Name: "s", Failures: 2})
		f2.readErr = unavailable("connection reset")
		_ = readK(g2)
		f2.readErr = nil
		if err := readK(g2); err != nil {
			t.Fatal(err)
		}
		f2.readErr = unavailable("connection reset")
		_ = readK(g2)
		if s := stateOf(t, g2); s != store.BreakerClosed {
			t.Fatalf("failed, whole, failed reads: the breaker is %v, want closed", s)
		}
		f2.fail(unavailable("down"))
		_ = getK(g2)
		if s := stateOf(t, g2); s != store.BreakerOpen {
			t.Fatalf("after a failed read and a failed Get the breaker is %v, want open", s)
		}
	})
}

// A guarded range reader still tells its object's size, which lets
// readers of whole objects allocate once.
func TestGuardReaderKeepsSize(t *testing.T) {
	g := store.Guard(newFlaky(t), store.GuardOptions{Name: "s"})
	r, err := g.NewRangeReader(context.Background(), "k", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sized, ok := r.(interface{ Size() int64 })
	if !ok || sized.Size() != int64(len("hello")) {
		t.Fatalf("guarded reader: Size method %v, want it to say %d", ok, len("hello"))
	}
}

// Against a real S3 endpoint that nobody listens on, the first Failures
// requests fail as unavailable (one connection attempt each: the client
// does not retry), and the next fail at once as refused by the breaker.
func TestGuardDeadS3Endpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	b := storetest.Open(t, "s3://logs?region=us-east-1&use_path_style=true&disable_https=true&endpoint="+url.QueryEscape("http://"+dead),
		&store.Options{AccessKeyID: "AKID", SecretAccessKey: "secret"})
	var ev events
	g := store.Guard(b, ev.options("logs", 3, time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for range 6 {
		_, err := g.Attributes(ctx, "log/00000000000000000000.jsonl")
		errs = append(errs, err)
	}
	for i, err := range errs {
		if i < 3 {
			if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrCircuitOpen) || !store.IsRetryable(err) {
				t.Fatalf("request %d to a dead endpoint = %v, want a retryable ErrUnavailable", i+1, err)
			}
			continue
		}
		wantRefused(t, fmt.Sprintf("request %d to a dead endpoint", i+1), err, "logs", "connection refused")
	}
	want := []string{"unavailable", "unavailable", "unavailable", "refused", "refused", "refused"}
	if got := ev.failures(); !slices.Equal(got, want) {
		t.Fatalf("OnFailure kinds = %v, want %v", got, want)
	}
	if ctx.Err() != nil {
		t.Fatal("the requests used up their 30 s context")
	}
	t.Logf("last: %v", errs[len(errs)-1])
}
