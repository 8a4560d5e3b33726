package agenthost

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/turnlog/turnlog/internal/sessionlog"
)

// DefaultFlushInterval is how long an Appender holds events before it
// writes them, when AppenderOptions.FlushInterval is 0.
const DefaultFlushInterval = 100 * time.Millisecond

var (
	// ErrStaleWriter: an Appender that owns the log (Log.AppenderAt) found
	// events it did not write. The error is a *StaleWriterError.
	ErrStaleWriter = sessionlog.ErrStaleWriter
	// ErrClosed: the Appender was closed.
	ErrClosed = errors.New("appender closed")
)

// StaleWriterError says where the log's head really is.
type StaleWriterError = sessionlog.StaleWriterError

// AppenderOptions adjust an Appender. The zero value is fine.
type AppenderOptions struct {
	// FlushInterval is the longest an added event waits before it is
	// written; DefaultFlushInterval if 0. Negative disables the timer:
	// events are written at response/finish, turn/end, Flush and Close.
	FlushInterval time.Duration
	// Writer names the appender in the writer tokens stored with its
	// segments; "" picks a random name. Two live appenders must not share
	// a name.
	Writer string
	// NoNudge turns off the nudge after a flush that ended a turn (see
	// Store.OpenSession).
	NoNudge bool
}

// Appender writes a live stream of events to a log. Events are added as
// they come and written as one segment per flush: every FlushInterval, and
// at once when an added event is a response/finish or a turn/end. Writes are
// create-if-absent and retried with the same writer token, so the events of
// a flush that succeeded are in the log exactly once.
//
// An event is acknowledged — durable, never to be written twice — when
// Flush, Close, or an Add that flushed returns nil after it was added. A
// flush that fails keeps its events and the next flush retries them first,
// with the same token when the store may have taken them, so retrying after
// an error never duplicates. Any number of Appenders, in any number of
// processes, may append to one log; an Appender made by Log.AppenderAt owns
// it instead and fails with ErrStaleWriter when another writer got there.
// Methods are safe for concurrent use.
type Appender struct {
	log   *Log
	app   *sessionlog.Appender
	opts  AppenderOptions
	owned bool

	// flushMu serialises writes: one segment at a time, in order.
	flushMu sync.Mutex
	// inflight is the batch being written, or left by a failed write; it
	// is retried as is before anything added after it. next (owned only)
	// is the seq the batch goes to. Guarded by flushMu.
	inflight []Event
	next     int64
	written  bool

	mu      sync.Mutex
	pending []Event
	err     error // permanent: the appender cannot go on
	closed  bool

	stop chan struct{}
	done chan struct{}
	kick chan struct{}

	// flushed, if set, is told how long each segment write took and how
	// many events it held (the benchmarks' flush latency).
	flushed func(time.Duration, int)
}

// Appender returns an appender that adds to the log wherever its head is,
// alongside any other writers.
func (l *Log) Appender(opts AppenderOptions) *Appender {
	return l.newAppender(opts, false, 0)
}

// AppenderAt returns an appender for a host that owns the log: its first
// segment must start at seq next (Head.Next), and each later one right
// after the previous. If another writer appends in between, the flush fails
// with a *StaleWriterError saying where the head is, and so do all later
// calls: the host must re-read the log before it writes again.
func (l *Log) AppenderAt(next int64, opts AppenderOptions) *Appender {
	return l.newAppender(opts, true, next)
}

func (l *Log) newAppender(opts AppenderOptions, owned bool, next int64) *Appender {
	if opts.FlushInterval == 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	a := &Appender{
		log: l, app: l.log.NewAppender(opts.Writer), opts: opts, owned: owned, next: next,
		stop: make(chan struct{}), done: make(chan struct{}), kick: make(chan struct{}, 1),
	}
	go a.run()
	return a
}

// run flushes FlushInterval after the first event of a batch was added.
func (a *Appender) run() {
	defer close(a.done)
	for {
		select {
		case <-a.stop:
			return
		case <-a.kick:
		}
		if a.opts.FlushInterval < 0 {
			continue
		}
		t := time.NewTimer(a.opts.FlushInterval)
		select {
		case <-a.stop:
			t.Stop()
			return
		case <-t.C:
		}
		// A failure is kept with its batch and retried at the next
		// flush; a permanent one is reported by the next call.
		_ = a.Flush(context.Background())
	}
}

// Add adds events. If one of them is a response/finish or a turn/end, Add
// flushes before it returns, and a nil error then acknowledges every event
// added so far. Otherwise the events wait for the next flush.
func (a *Appender) Add(ctx context.Context, events ...Event) error {
	flush := false
	a.mu.Lock()
	if err := a.unusable(); err != nil {
		a.mu.Unlock()
		return err
	}
	first := len(a.pending) == 0
	a.pending = append(a.pending, events...)
	for _, e := range events {
		flush = flush || e.endsBatch()
	}
	a.mu.Unlock()
	if flush {
		return a.Flush(ctx)
	}
	if first && len(events) > 0 {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

func (a *Appender) unusable() error {
	if a.err != nil {
		return a.err
	}
	if a.closed {
		return ErrClosed
	}
	return nil
}

// Flush writes every event added so far and returns when they are in the
// log (nil) or could not all be written.
func (a *Appender) Flush(ctx context.Context) error {
	a.flushMu.Lock()
	defer a.flushMu.Unlock()
	for {
		if a.inflight == nil {
			a.mu.Lock()
			if a.err != nil {
				a.mu.Unlock()
				return a.err
			}
			a.inflight, a.pending = a.pending, nil
			a.mu.Unlock()
			if len(a.inflight) == 0 {
				a.inflight = nil
				return nil
			}
		}
		if err := a.write(ctx); err != nil {
			return err
		}
	}
}

// write writes the inflight batch as one segment.
func (a *Appender) write(ctx context.Context) error {
	data := make([][]byte, len(a.inflight))
	endsTurn := false
	for i, e := range a.inflight {
		data[i] = e.data
		endsTurn = endsTurn || e.typ == "turn/end"
	}
	var err error
	start := time.Now()
	if a.owned {
		err = a.app.AppendAt(ctx, a.next, data...)
	} else {
		_, err = a.app.Append(ctx, data...)
	}
	if partial, ok := errors.AsType[*sessionlog.PartialAppendError](err); ok {
		// A batch over sessionlog.SplitBytes went in as several
		// segments and stopped part way: keep only the rest for the
		// next flush, so nothing is written twice.
		a.next += partial.Appended
		a.inflight = a.inflight[partial.Appended:]
		err = partial.Err
	}
	if err != nil {
		// A stale owner must re-read the log; anything else (the store
		// failing, ctx ending) is retried by the next flush.
		if errors.Is(err, ErrStaleWriter) {
			a.mu.Lock()
			a.err = err
			a.mu.Unlock()
		}
		return err
	}
	if a.flushed != nil {
		a.flushed(time.Since(start), len(a.inflight))
	}
	a.next += int64(len(a.inflight))
	a.inflight = nil
	if endsTurn && !a.opts.NoNudge {
		a.log.nudge(ctx)
	}
	return nil
}

// Close flushes what was added and stops the appender. It returns the
// flush's error; after it, Add fails with ErrClosed.
func (a *Appender) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	close(a.stop)
	<-a.done
	return a.Flush(ctx)
}
