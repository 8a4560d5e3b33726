package sessionlog

import (
	"context"
)

// A log written by a host that flushes every turn is thousands of small
// segments, and reading it one GET after another costs a round trip per
// segment: a fork's cut and its child's first assembly read the whole
// prefix. So Read fetches the next small segments while the caller works
// on the current one.

// readAheadSegments is how many segments are fetched ahead of the one being
// read. A variable only so that a benchmark can compare reading without it
// in the same run.
var readAheadSegments = 8

const (
	// readAheadMaxBytes is the largest segment fetched ahead; larger ones
	// are streamed when their turn comes, so a Read holds at most
	// readAheadSegments of these at once (8 MiB).
	readAheadMaxBytes = 1 << 20
)

// fetched is a segment's bytes fetched ahead, or why they could not be.
type fetched struct {
	data []byte
	err  error
}

// readAhead fetches the small segments of segs in order, up to
// readAheadSegments ahead of the one the reader takes.
type readAhead struct {
	segs    []segment
	pending []chan fetched // by index in segs; nil: not fetched ahead
	next    int            // the next index to start fetching
	taken   int            // the next index the reader takes
	cancel  context.CancelFunc
	ctx     context.Context
	l       *Log
}

func (l *Log) newReadAhead(ctx context.Context, segs []segment) *readAhead {
	ctx, cancel := context.WithCancel(ctx)
	ra := &readAhead{segs: segs, pending: make([]chan fetched, len(segs)), ctx: ctx, cancel: cancel, l: l}
	ra.fill()
	return ra
}

// fill starts fetches until readAheadSegments are ahead of the reader.
func (ra *readAhead) fill() {
	for ; ra.next < len(ra.segs) && ra.next < ra.taken+readAheadSegments; ra.next++ {
		seg := ra.segs[ra.next]
		if seg.size > readAheadMaxBytes {
			continue
		}
		ch := make(chan fetched, 1)
		ra.pending[ra.next] = ch
		go func() {
			data, err := readLimited(ra.ctx, ra.l.b, seg.key, readAheadMaxBytes)
			ch <- fetched{data, err}
		}()
	}
}

// take returns segment i's bytes if they were fetched ahead, nil when the
// reader should stream the segment itself (a large one, or a fetch that
// failed: the stream retries, and reports what is wrong in its own words).
// Segments are taken in order.
func (ra *readAhead) take(i int) []byte {
	ch := ra.pending[i]
	ra.pending[i] = nil
	ra.taken = i + 1
	ra.fill()
	if ch == nil {
		return nil
	}
	select {
	case f := <-ch:
		if f.err != nil {
			return nil
		}
		return f.data
	case <-ra.ctx.Done():
		return nil
	}
}

// close stops the fetches still going; their goroutines end on the
// cancelled context and nothing waits for them.
func (ra *readAhead) close() { ra.cancel() }
