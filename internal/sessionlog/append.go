package sessionlog

import (
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
// An error wrapping ErrOutcomeUnknown means the events may be in the log;
// appending them again could store them twice. Any other error means they
// were not appended.
func (a *Appender) Append(ctx context.Context, events ...[]byte) (int64, error) {
	b, err := prepare(events)
	if err != nil {
		return 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.position(ctx, -1); err != nil {
		return 0, err
	}
	token := a.token()
	for {
		first := a.next
		taken, err := a.write(ctx, first, b, token)
		if err != nil {
			a.positioned = false
			return 0, err
		}
		if taken == 0 {
			a.next = first + int64(len(b))
			return first, nil
		}
		a.next = first + taken
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
	if err := a.position(ctx, next); err != nil {
		return err
	}
	if a.next != next {
		return &StaleWriterError{Expected: next, Next: a.next}
	}
	taken, err := a.write(ctx, next, b, a.token())
	if err != nil {
		a.positioned = false
		return err
	}
	if taken == 0 {
		a.next = next + int64(len(b))
		return nil
	}
	// Somebody else appended at next: report the real head.
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
func (a *Appender) write(ctx context.Context, first int64, b batch, token string) (int64, error) {
	l := a.log
	key := l.segmentKey(first)
	data := b.render(first)
	md := map[string]string{metaWriter: token}
	// uncertain: an earlier attempt at this key may have been stored.
	uncertain := false
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
