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

	// split is the split size set by SetSplitBytes; 0 for SplitBytes.
	split int

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
// An error wrapping ErrOutcomeUnknown means the events may be in the log:
// a write request failed after it may have reached the store. Appending the
// same events again, before any others, with the same Appender retries that
// write idempotently: they end up in the log once. Any other error means
// they were not appended.
//
// A batch larger than the appender's split size (SplitBytes unless
// SetSplitBytes says otherwise) is written as several consecutive segments;
// if the log moves on between them, or one's outcome is unknown, the error
// is a *PartialAppendError saying which events are in: append the rest
// (the events from Appended on) to go on, which retries an unknown outcome
// idempotently as above.
func (a *Appender) Append(ctx context.Context, events ...[]byte) (int64, error) {
	b, err := prepare(events)
	if err != nil {
		return 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	pieces := b.split(a.splitBytes())
	first, err := a.appendSegment(ctx, pieces[0])
	if err != nil {
		return 0, err
	}
	if err := a.appendRest(ctx, first, pieces); err != nil {
		return first, err
	}
	return first, nil
}

// appendRest writes the pieces after the first of a split batch whose
// first piece is at seq first.
func (a *Appender) appendRest(ctx context.Context, first int64, pieces []batch) error {
	next := first + int64(len(pieces[0]))
	for _, p := range pieces[1:] {
		if err := a.appendSegmentAt(ctx, next, p); err != nil {
			return &PartialAppendError{First: first, Appended: next - first, Err: err}
		}
		next += int64(len(p))
	}
	return nil
}

// appendSegment writes b as one segment at the head.
func (a *Appender) appendSegment(ctx context.Context, b batch) (int64, error) {
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
//
// A batch larger than the split size is written as consecutive segments
// from next on; if the log moves on between them, the error is a
// *PartialAppendError (wrapping the *StaleWriterError) saying which events
// are in.
func (a *Appender) AppendAt(ctx context.Context, next int64, events ...[]byte) error {
	b, err := prepare(events)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	pieces := b.split(a.splitBytes())
	if err := a.appendSegmentAt(ctx, next, pieces[0]); err != nil {
		return err
	}
	return a.appendRest(ctx, next, pieces)
}

// appendSegmentAt writes b as one segment at next, if that is the head.
func (a *Appender) appendSegmentAt(ctx context.Context, next int64, b batch) error {
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

// SetSplitBytes sets the size at which Append and AppendAt split a batch
// into several segments: n bytes, at most MaxSegmentBytes - MaxLineBytes so
// that every segment stays within MaxSegmentBytes; n <= 0 restores
// SplitBytes. Call it before appending.
func (a *Appender) SetSplitBytes(n int) {
	a.split = min(max(n, 0), MaxSegmentBytes-MaxLineBytes)
}

func (a *Appender) splitBytes() int {
	if a.split > 0 {
		return a.split
	}
	return SplitBytes
}

// PartialAppendError: a batch written as several segments stopped after
// some of them. Its first Appended events are in the log from seq First on;
// the rest are not, unless Err wraps ErrOutcomeUnknown, which leaves the
// next segment's fate unknown.
type PartialAppendError struct {
	First, Appended int64
	Err             error
}

func (e *PartialAppendError) Error() string {
	return fmt.Sprintf("appended only the first %d events of the batch (seq %d..%d), the rest is not: %v", e.Appended, e.First, e.First+e.Appended-1, e.Err)
}

func (e *PartialAppendError) Unwrap() error { return e.Err }

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
	if len(data) > MaxSegmentBytes {
		return 0, segmentTooLarge(key, int64(len(data)))
	}
	md := map[string]string{metaWriter: token}
	fail := func(err error) (int64, error) {
		if uncertain {
			return 0, fmt.Errorf("append to %s at seq %d: %w: %w", l.loc, first, ErrOutcomeUnknown, err)
		}
		return 0, fmt.Errorf("append to %s at seq %d: %w", l.loc, first, err)
	}
	var tries budget
	for {
		err := l.b.PutIfAbsent(ctx, key, data, md)
		if err == nil {
			return 0, nil
		}
		if errors.Is(err, store.ErrExists) {
			taken, mine, ierr := a.inspect(ctx, key, first, token)
			switch {
			case ierr == nil && mine:
				return 0, nil
			case ierr == nil:
				return taken, nil
			case errors.Is(ierr, store.ErrNotFound):
				// A precondition failure for a key that is free (a
				// service hiccup): try again, as after a conflict.
				err = fmt.Errorf("%w: %w", store.ErrConflict, ierr)
			default:
				err = ierr
				if !store.IsRetryable(err) {
					return fail(err)
				}
			}
		} else {
			// The request may have reached the store whatever the
			// error says (a connection cut after the body was sent, ctx
			// ending while the answer was on its way): from here on the
			// segment at key may be this batch's. (Not when a circuit
			// breaker refused it: that request was never sent.)
			if !errors.Is(err, store.ErrCircuitOpen) {
				uncertain = true
			}
			if !store.IsRetryable(err) {
				return fail(err)
			}
		}
		if again, err := tries.again(ctx, err); !again {
			return fail(err)
		}
	}
}

// inspect looks at the segment found at key: is it this batch's, and if
// not, how many events does it hold. The token is checked even after a
// first attempt that failed cleanly with "exists": a client library that
// retries on its own (the AWS SDK does, on a dropped connection) turns a
// write that landed into a precondition failure of its second try.
func (a *Appender) inspect(ctx context.Context, key string, first int64, token string) (taken int64, mine bool, err error) {
	attrs, err := a.log.b.Attributes(ctx, key)
	if err != nil {
		return 0, false, err
	}
	if attrs.Metadata[metaWriter] == token {
		return 0, true, nil
	}
	n, err := a.log.streamSegment(ctx, segment{key: key, first: first}, nil, func(Event) error { return nil })
	if err != nil {
		return 0, false, err
	}
	return n, false, nil
}
