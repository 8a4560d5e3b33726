package sessionlog

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/turnlog/turnlog/internal/store"
)

// Appender appends to one log. Any number of appenders, in any number of
// processes, may append to the same log at once: each append lands as one
// segment at the head, and seqs stay dense. One Appender runs one append at
// a time.
type Appender struct {
	log    *Log
	writer string

	mu      sync.Mutex
	batches uint64
	// next is the seq the log's next event gets, as far as this appender
	// knows; valid if positioned.
	next       int64
	positioned bool
	// unsure is the last batch whose append ended with its outcome
	// unknown. Appending the same events again retries that write — same
	// seq, same token — so a batch that did land is recognised, not
	// stored twice.
	unsure *unsureBatch
}

type unsureBatch struct {
	first int64
	token string
	data  []byte
}

// retryOf returns the unsure write b repeats, if it does, and forgets it
// either way: once other events are appended, retrying could duplicate.
func (a *Appender) retryOf(b batch) *unsureBatch {
	u := a.unsure
	a.unsure = nil
	if u == nil || !bytes.Equal(u.data, b.render(u.first)) {
		return nil
	}
	return u
}

// failed records a failed write of b at first.
func (a *Appender) failed(err error, first int64, b batch, token string) {
	a.positioned = false
	if errors.Is(err, ErrOutcomeUnknown) {
		a.unsure = &unsureBatch{first: first, token: token, data: b.render(first)}
	}
}

// NewAppender returns an appender. writer names it in the tokens it stores
// with its segments; "" picks a random name. Two live appenders must not
// share a name.
func (l *Log) NewAppender(writer string) *Appender {
	if writer == "" {
		writer = rand.Text()
	}
	return &Appender{log: l, writer: writer}
}

// Append writes events as one segment at the log's head and returns the seq
// of the first. Each event is a JSON object with a "type" and without a
// "seq": the log assigns seqs. If another writer takes the head first,
// Append moves past that writer's segment and tries again.
//
// An error wrapping ErrOutcomeUnknown means the events may be in the log.
// Appending the same events again, before any others, with the same
// Appender retries that write idempotently: they end up in the log once.
// Any other error means they were not appended.
func (a *Appender) Append(ctx context.Context, events ...[]byte) (int64, error) {
	b, err := prepare(events)
	if err != nil {
		return 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	u := a.retryOf(b)
	if err := a.position(ctx, -1); err != nil {
		if u != nil {
			a.unsure = u // still unsure
		}
		return 0, err
	}
	first, token, uncertain := a.next, "", false
	if u != nil {
		first, token, uncertain = u.first, u.token, true
	} else {
		token = a.token()
	}
	for {
		taken, err := a.write(ctx, first, b, token, uncertain)
		if err != nil {
			a.failed(err, first, b, token)
			return 0, err
		}
		if taken == 0 {
			a.next = first + int64(len(b))
			return first, nil
		}
		// Another writer's segment is at first: an earlier attempt of
		// this batch did not land there, and none was made further on.
		first, uncertain = first+taken, false
	}
}

// AppendAt writes events as one segment at seq next, provided that next is
// where the log's head is: a writer that has fallen behind — the log has
// events at or after next — gets a *StaleWriterError (ErrStaleWriter)
// saying where the head is, and so does one that is ahead of the log.
func (a *Appender) AppendAt(ctx context.Context, next int64, events ...[]byte) error {
	b, err := prepare(events)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if u := a.retryOf(b); u != nil && u.first == next {
		// The head is past next if the unsure write landed: retry it
		// at next before judging the writer stale.
		taken, err := a.write(ctx, next, b, u.token, true)
		if err != nil {
			a.failed(err, next, b, u.token)
			return err
		}
		if taken == 0 {
			a.next, a.positioned = next+int64(len(b)), true
			return nil
		}
		return a.stale(ctx, next, taken)
	}
	if err := a.position(ctx, next); err != nil {
		return err
	}
	if a.next != next {
		return &StaleWriterError{Expected: next, Next: a.next}
	}
	token := a.token()
	taken, err := a.write(ctx, next, b, token, false)
	if err != nil {
		a.failed(err, next, b, token)
		return err
	}
	if taken == 0 {
		a.next = next + int64(len(b))
		return nil
	}
	return a.stale(ctx, next, taken)
}

// stale reports that another writer's segment of taken events is at next.
func (a *Appender) stale(ctx context.Context, next, taken int64) error {
	a.positioned = false
	if err := a.position(ctx, -1); err != nil {
		return fmt.Errorf("%w (and finding the head failed: %w)", &StaleWriterError{Expected: next, Next: next + taken}, err)
	}
	return &StaleWriterError{Expected: next, Next: a.next}
}

// position makes a.next current, reading the head unless a.next already is
// the expected value (expect < 0: any).
func (a *Appender) position(ctx context.Context, expect int64) error {
	if a.positioned && (expect < 0 || a.next == expect) {
		return nil
	}
	h, err := a.log.Head(ctx)
	if err != nil {
		return fmt.Errorf("append to %s: %w", a.log.loc, err)
	}
	a.next, a.positioned = h.Next, true
	return nil
}

func (a *Appender) token() string {
	a.batches++
	return a.writer + "." + strconv.FormatUint(a.batches, 10)
}

// write creates the segment for b at first, retrying transient failures.
// It returns 0 when the segment holding b is stored at first (now or by an
// earlier attempt whose answer was lost), or, when another writer's segment
// is there, how many events that segment holds.
// uncertain says an earlier attempt at this key may have been stored.
func (a *Appender) write(ctx context.Context, first int64, b batch, token string, uncertain bool) (int64, error) {
	l := a.log
	key := l.segmentKey(first)
	data := b.render(first)
	md := map[string]string{metaWriter: token}
	fail := func(err error) (int64, error) {
		if uncertain {
			return 0, fmt.Errorf("append to %s at seq %d: %w: %w", l.loc, first, ErrOutcomeUnknown, err)
		}
		return 0, fmt.Errorf("append to %s at seq %d: %w", l.loc, first, err)
	}
	for attempt := 1; ; attempt++ {
		err := l.b.PutIfAbsent(ctx, key, data, md)
		if err == nil {
			return 0, nil
		}
		if errors.Is(err, store.ErrExists) {
			taken, mine, ierr := a.inspect(ctx, key, first, token, uncertain)
			switch {
			case ierr == nil && mine:
				return 0, nil
			case ierr == nil:
				return taken, nil
			case errors.Is(ierr, store.ErrNotFound):
				// A precondition failure for a key that is free (a
				// service hiccup): try again.
				err = ierr
			default:
				err = ierr
				if !store.IsRetryable(err) {
					return fail(err)
				}
			}
		} else if store.IsRetryable(err) {
			uncertain = true
		} else {
			return fail(err)
		}
		if attempt == attempts {
			return fail(fmt.Errorf("giving up after %d attempts: %w", attempts, err))
		}
		if werr := backoff(ctx, attempt); werr != nil {
			return fail(errors.Join(err, werr))
		}
	}
}

// inspect looks at the segment found at key: is it this batch's (only
// possible if an earlier attempt was uncertain), and if not, how many events
// does it hold.
func (a *Appender) inspect(ctx context.Context, key string, first int64, token string, uncertain bool) (taken int64, mine bool, err error) {
	if uncertain {
		attrs, err := a.log.b.Attributes(ctx, key)
		if err != nil {
			return 0, false, err
		}
		if attrs.Metadata[metaWriter] == token {
			return 0, true, nil
		}
	}
	_, events, err := a.log.readSegment(ctx, segment{key: key, first: first})
	if err != nil {
		return 0, false, err
	}
	return int64(len(events)), false, nil
}
