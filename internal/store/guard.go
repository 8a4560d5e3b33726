package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// ErrCircuitOpen: the store's circuit breaker is open (see Guard), so the
// request was not sent. The error is an *OpenCircuitError, and also
// ErrUnavailable; it is not retryable: the breaker itself decides when the
// store is tried again.
var ErrCircuitOpen = errors.New("circuit open")

// GuardOptions configure Guard. The zero value is fine.
type GuardOptions struct {
	// Name is the store's name, in errors and in OnStateChange.
	Name string
	// Failures is how many failures in a row open the breaker; zero is
	// DefaultBreakerFailures.
	Failures uint32
	// Timeouts is how many requests in a row that got no answer in time
	// open it (each held its caller for the whole timeout); zero is
	// DefaultBreakerTimeouts.
	Timeouts uint32
	// OpenFor is how long the breaker stays open before one request is let
	// through as a probe; zero is DefaultBreakerOpenFor.
	OpenFor time.Duration
	// OnStateChange, if set, is told each change of the breaker's state,
	// with the last failure the breaker counted (nil before any). It runs
	// under the breaker's lock: it must not call the bucket.
	OnStateChange func(store string, to BreakerState, last error)
	// OnFailure, if set, is told each failure the breaker counts, and each
	// request it refused, by kind: "unavailable", "timeout" or "refused".
	OnFailure func(store, kind string)
}

// Defaults of GuardOptions.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerTimeouts = 2
	DefaultBreakerOpenFor  = 10 * time.Second
)

// BreakerState is the state of a store's circuit breaker.
type BreakerState int

const (
	// BreakerClosed: requests go to the store.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: one request goes to the store as a probe; the
	// others are refused until it answers.
	BreakerHalfOpen
	// BreakerOpen: requests are refused at once.
	BreakerOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	default:
		return "closed"
	}
}

// OpenCircuitError is ErrCircuitOpen: it names the store, says since when
// it has been failing and keeps the last failure.
type OpenCircuitError struct {
	Store string
	// Since is when the breaker opened.
	Since time.Time
	// Failures is how many requests in a row had failed when it opened.
	Failures uint32
	// Last is the failure that opened it, or the last probe's.
	Last error
}

func (e *OpenCircuitError) Error() string {
	return fmt.Sprintf("store %q is failing: %d requests in a row failed, the last at %s (%v); its requests fail at once until a probe succeeds",
		e.Store, e.Failures, e.Since.UTC().Format(time.TimeOnly), e.Last)
}

func (e *OpenCircuitError) Unwrap() []error { return []error{ErrCircuitOpen, ErrUnavailable, e.Last} }

// Guard wraps b with a circuit breaker (github.com/sony/gobreaker): after
// Failures requests in a row fail because the store could not be reached
// or did not answer (ErrUnavailable, ErrTimeout, or the caller's deadline
// passing while it waited), or Timeouts in a row got no answer at all,
// every request fails at once with an
// *OpenCircuitError for OpenFor; then one request is let through, and its
// success closes the breaker (its failure opens it again). So the callers
// of a dead or hanging store spend no time on it once it is known to be
// failing, and whatever else they do (other stores' Sessions) goes on.
//
// Answers of a store that works are never counted as failures: a missing
// object, a taken key, a conflict between racing writers, a refusal. A
// caller that gives up (context.Canceled) counts for nothing.
func Guard(b Bucket, opts GuardOptions) Bucket {
	g := &guardedBucket{Bucket: b, opts: opts}
	failures := opts.Failures
	if failures == 0 {
		failures = DefaultBreakerFailures
	}
	timeouts := opts.Timeouts
	if timeouts == 0 {
		timeouts = DefaultBreakerTimeouts
	}
	openFor := opts.OpenFor
	if openFor <= 0 {
		openFor = DefaultBreakerOpenFor
	}
	g.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        opts.Name,
		MaxRequests: 1,
		Timeout:     openFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			if c.ConsecutiveFailures >= failures || g.timeouts.Load() >= timeouts {
				g.tripped.Store(c.ConsecutiveFailures)
				return true
			}
			return false
		},
		IsExcluded: func(err error) bool { return errors.Is(err, errExcluded) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			g.mu.Lock()
			if to == gobreaker.StateOpen {
				g.openedAt = time.Now()
			}
			last := g.last
			g.mu.Unlock()
			if opts.OnStateChange != nil {
				opts.OnStateChange(opts.Name, breakerState(to), last)
			}
		},
	})
	return g
}

// errExcluded is what a request the caller gave up on reports to the
// breaker: neither a success nor a failure.
var errExcluded = errors.New("excluded")

type guardedBucket struct {
	Bucket
	opts GuardOptions
	cb   *gobreaker.TwoStepCircuitBreaker[struct{}]
	// timeouts counts the requests in a row that got no answer in time;
	// tripped is how many failed in a row when the breaker last opened.
	timeouts, tripped atomic.Uint32

	mu       sync.Mutex
	last     error
	openedAt time.Time
}

// State is the breaker's state now.
func (g *guardedBucket) State() BreakerState { return breakerState(g.cb.State()) }

func breakerState(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	case gobreaker.StateOpen:
		return BreakerOpen
	default:
		return BreakerClosed
	}
}

// BreakerStateOf returns the state of b's breaker, if b is a Guard.
func BreakerStateOf(b Bucket) (BreakerState, bool) {
	if g, ok := b.(*guardedBucket); ok {
		return g.State(), true
	}
	return BreakerClosed, false
}

// allow asks the breaker to let a request through: done reports how it
// went. Refused, it returns an *OpenCircuitError.
func (g *guardedBucket) allow(ctx context.Context) (done func(error) error, err error) {
	report, err := g.cb.Allow()
	if err != nil {
		g.mu.Lock()
		refused := &OpenCircuitError{Store: g.opts.Name, Since: g.openedAt, Failures: g.tripped.Load(), Last: g.last}
		g.mu.Unlock()
		if refused.Last == nil {
			refused.Last = err
		}
		if g.opts.OnFailure != nil {
			g.opts.OnFailure(g.opts.Name, "refused")
		}
		return nil, refused
	}
	return func(err error) error {
		report(g.outcome(ctx, err))
		return err
	}, nil
}

// outcome is what err says about the store, for the breaker: nil for an
// answer, errExcluded for a request the caller gave up on, err for a
// store that could not be reached or did not answer in time.
func (g *guardedBucket) outcome(ctx context.Context, err error) error {
	var kind string
	switch {
	case err == nil:
		g.timeouts.Store(0)
		return nil
	case errors.Is(ctx.Err(), context.Canceled):
		return errExcluded
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The caller's deadline passed while the store kept it waiting.
		kind = "timeout"
		g.timeouts.Add(1)
	case errors.Is(err, ErrUnavailable):
		kind = "unavailable"
		g.timeouts.Store(0)
	default:
		g.timeouts.Store(0)
		return nil
	}
	g.mu.Lock()
	g.last = err
	g.mu.Unlock()
	if g.opts.OnFailure != nil {
		g.opts.OnFailure(g.opts.Name, kind)
	}
	return err
}

func (g *guardedBucket) Get(ctx context.Context, key string) ([]byte, error) {
	done, err := g.allow(ctx)
	if err != nil {
		return nil, err
	}
	data, err := g.Bucket.Get(ctx, key)
	return data, done(err)
}

func (g *guardedBucket) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	done, err := g.allow(ctx)
	if err != nil {
		return nil, err
	}
	r, err := g.Bucket.NewRangeReader(ctx, key, offset, length)
	if err != nil {
		return nil, done(err)
	}
	return &guardedReader{ReadCloser: r, done: done}, nil
}

// guardedReader reports to the breaker once: the first error its body
// gives other than io.EOF, or success when closed without one.
type guardedReader struct {
	io.ReadCloser
	done     func(error) error
	reported bool
}

func (r *guardedReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil && err != io.EOF && !r.reported {
		r.reported = true
		r.done(err)
	}
	return n, err
}

// Size passes on the size of the whole object, as the backends' readers
// tell it (readers of whole objects allocate once by it); -1 if unknown.
func (r *guardedReader) Size() int64 {
	if s, ok := r.ReadCloser.(interface{ Size() int64 }); ok {
		return s.Size()
	}
	return -1
}

func (r *guardedReader) Close() error {
	if !r.reported {
		r.reported = true
		r.done(nil)
	}
	return r.ReadCloser.Close()
}

func (g *guardedBucket) Attributes(ctx context.Context, key string) (Attributes, error) {
	done, err := g.allow(ctx)
	if err != nil {
		return Attributes{}, err
	}
	a, err := g.Bucket.Attributes(ctx, key)
	return a, done(err)
}

func (g *guardedBucket) PutIfAbsent(ctx context.Context, key string, data []byte, metadata map[string]string) error {
	done, err := g.allow(ctx)
	if err != nil {
		return err
	}
	return done(g.Bucket.PutIfAbsent(ctx, key, data, metadata))
}

func (g *guardedBucket) Put(ctx context.Context, key string, data []byte, metadata map[string]string) error {
	done, err := g.allow(ctx)
	if err != nil {
		return err
	}
	return done(g.Bucket.Put(ctx, key, data, metadata))
}

func (g *guardedBucket) Copy(ctx context.Context, dst, src string) error {
	done, err := g.allow(ctx)
	if err != nil {
		return err
	}
	return done(g.Bucket.Copy(ctx, dst, src))
}

func (g *guardedBucket) List(ctx context.Context, prefix string) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		done, err := g.allow(ctx)
		if err != nil {
			yield(Object{}, err)
			return
		}
		var failed error
		defer func() { done(failed) }()
		for o, err := range g.Bucket.List(ctx, prefix) {
			if err != nil && !errors.Is(err, ErrRefused) {
				failed = err
			}
			if !yield(o, err) {
				return
			}
		}
	}
}

func (g *guardedBucket) Delete(ctx context.Context, key string) error {
	done, err := g.allow(ctx)
	if err != nil {
		return err
	}
	return done(g.Bucket.Delete(ctx, key))
}
