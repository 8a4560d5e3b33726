package sessionlog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/turnlog/turnlog/internal/store"
)

// The retry budget of one store operation. Every retry path of this
// package goes through a budget, and nothing else retries: the S3 client
// is opened with no retries of its own (store.Open), so the tries do not
// multiply.
//
//   - A conflict between racing writers (store.ErrConflict) is retried up
//     to attempts times: it clears as soon as the other writer is done.
//   - A store that could not be reached or did not answer
//     (store.ErrUnavailable, store.ErrTimeout) is retried up to
//     unavailableAttempts times: a restart or a dropped connection passes
//     in that many, a dead store does not, and its callers should hear so
//     in seconds, not minutes.
//   - A request a store's circuit breaker refused is not retried at all
//     (store.ErrCircuitOpen): the breaker knows the store is failing.
//   - No retry starts when its backoff would end past the caller's
//     deadline: the caller learns the error now instead of a deadline
//     later.
const (
	attempts            = 20
	unavailableAttempts = 5
)

// clock is what budgets wait with; tests replace it with a fake.
var clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
} = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// budget counts the tries of one operation.
type budget struct {
	tries, unavailable int
}

// again reports whether the operation that just failed with err may be
// tried again, after waiting its backoff; if not, it returns the error to
// give the caller. Only for idempotent operations, or ones that check
// what an earlier try left (Appender.write).
func (b *budget) again(ctx context.Context, err error) (bool, error) {
	b.tries++
	if !store.IsRetryable(err) {
		return false, err
	}
	if !errors.Is(err, store.ErrConflict) {
		b.unavailable++
	}
	if b.tries >= attempts || b.unavailable >= unavailableAttempts {
		return false, fmt.Errorf("giving up after %d tries: %w", b.tries, err)
	}
	d := backoff(b.tries)
	if deadline, ok := ctx.Deadline(); ok && clock.Now().Add(d).After(deadline) {
		return false, fmt.Errorf("giving up after %d tries: the next would start past the deadline: %w", b.tries, err)
	}
	if werr := clock.Sleep(ctx, d); werr != nil {
		return false, errors.Join(err, werr)
	}
	return true, nil
}

// backoff is the wait before try number tries+1: exponential from 2 ms,
// capped at 250 ms, with full jitter so that racing writers spread out.
func backoff(tries int) time.Duration {
	d := min(2*time.Millisecond<<min(tries-1, 10), 250*time.Millisecond)
	return rand.N(d) + time.Millisecond
}

// retry runs op until it succeeds, fails permanently, or its budget runs
// out. Only for idempotent operations.
func retry(ctx context.Context, op func() error) error {
	var b budget
	for {
		err := op()
		if err == nil {
			return nil
		}
		if again, err := b.again(ctx, err); !again {
			return err
		}
	}
}
