package sessionlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"sort"
)

// HeadInfo summarises a log from its last segments, for a Session's status.
type HeadInfo struct {
	// Next is the number of events, which is also the seq the next append
	// gets.
	Next int64
	// Turns is the highest turn number seen.
	Turns int64
	// TurnOpen: the last turn has started and not ended.
	TurnOpen bool
	// LastTurnEnd is the last turn/end event; nil if no turn has ended.
	LastTurnEnd *TurnEnd
	// Segments is the number of segment objects listed: the log's own
	// alone when the head was found among them.
	Segments int
}

// Head returns the seq of the last event, -1 for an empty log.
func (h HeadInfo) Head() int64 { return h.Next - 1 }

// TurnEnd is a turn/end event.
type TurnEnd struct {
	Seq    int64
	Turn   int64
	Reason string
}

// Head finds the log's head without reading the whole log: it lists the
// segment keys and reads segments backwards from the last one until it has
// seen a turn/end (or the start of the log). Segments are streamed and
// summarised as they are read, so a Head holds one line at a time, however
// large the segments.
//
// A listing made while another writer creates segments may miss one made
// just before one it shows (a directory read returns entries in its own
// order): segments are only ever added, so a gap that a second listing
// does not show was such a race, and one that stays is bad data.
func (l *Log) Head(ctx context.Context) (HeadInfo, error) {
	for attempt := 1; ; attempt++ {
		h, err := l.head(ctx)
		if _, gap := errors.AsType[*gapError](err); !gap || attempt == headListings {
			return h, err
		}
	}
}

// headListings is how many times Head lists the segments before it reports
// a gap between them.
const headListings = 3

// gapError marks the DataError of a gap between two segments.
type gapError struct{ *DataError }

func (e *gapError) Unwrap() error { return e.DataError }

func (l *Log) head(ctx context.Context) (HeadInfo, error) {
	own, refs, err := l.listOwn(ctx)
	if err != nil {
		return HeadInfo{}, err
	}
	if len(refs.Refs) > 0 && len(own) > 0 && own[0].first == refs.end() {
		// A fork's child that has gone on: reading back from its last
		// segment almost always meets a turn/end among its own, and then
		// the Sessions it refers to (whose listings grow with their
		// history) are not listed at all, at every poll of the child.
		if h, found, err := l.headOf(ctx, own, false); err != nil || found {
			return h, err
		}
	}
	segs, err := l.merged(ctx, own, refs)
	if err != nil {
		return HeadInfo{}, err
	}
	h, _, err := l.headOf(ctx, segs, true)
	return h, err
}

// headOf reads segs backwards from the last until one holds a turn/end.
// segs are the whole log's when whole is set; otherwise the last of them,
// and found is false when none of them holds a turn/end.
func (l *Log) headOf(ctx context.Context, segs []segment, whole bool) (h HeadInfo, found bool, err error) {
	if len(segs) == 0 {
		return HeadInfo{}, true, nil
	}
	var tail []segmentSummary // segments read, last first
	for i := len(segs) - 1; i >= 0; i-- {
		var sum segmentSummary
		n, err := l.streamSegment(ctx, segs[i], func() { sum = segmentSummary{} }, func(e Event) error {
			sum.fold(e)
			return nil
		})
		if err != nil {
			return HeadInfo{}, false, fmt.Errorf("head of %s: %w", l.loc, err)
		}
		if i+1 < len(segs) && segs[i].first+n != segs[i+1].first {
			return HeadInfo{}, false, fmt.Errorf("head of %s: %w", l.loc, boundaryError(segs[i], n, segs[i+1]))
		}
		sum.n = n
		tail = append(tail, sum)
		if sum.lastEnd != nil {
			found = true
			break
		}
	}
	if !found && !whole {
		return HeadInfo{}, false, nil
	}
	last := segs[len(segs)-1]
	h = HeadInfo{Next: last.first + tail[0].n, Segments: len(segs)}
	for j := len(tail) - 1; j >= 0; j-- {
		t := tail[j]
		h.Turns = max(h.Turns, t.turns)
		switch t.lastMarker {
		case "turn/start":
			h.TurnOpen = true
		case "turn/end":
			h.TurnOpen = false
		}
		if t.lastEnd != nil {
			h.LastTurnEnd = t.lastEnd
		}
	}
	return h, true, nil
}

// segmentSummary is what Head keeps of one segment.
type segmentSummary struct {
	n     int64
	turns int64
	// lastMarker is the type of the segment's last turn/start or turn/end.
	lastMarker string
	lastEnd    *TurnEnd
}

func (s *segmentSummary) fold(e Event) {
	s.turns = max(s.turns, e.Turn)
	switch e.Type {
	case "turn/start":
		s.lastMarker = e.Type
	case "turn/end":
		s.lastMarker = e.Type
		s.lastEnd = &TurnEnd{Seq: e.Seq, Turn: e.Turn, Reason: e.Reason}
	}
}

func boundaryError(seg segment, n int64, next segment) error {
	end := seg.first + n
	if end < next.first {
		return &gapError{&DataError{Key: next.key, Msg: fmt.Sprintf("gap: the previous segment ends at seq %d", end-1)}}
	}
	return &DataError{Key: next.key, Msg: fmt.Sprintf("overlap: the previous segment ends at seq %d", end-1)}
}

// Read yields the events with from <= seq <= through in seq order, reading
// only the segments that hold them. through may be past the head (use
// math.MaxInt64 for "to the end"); the events that exist are yielded.
// Iteration stops at the first error, which is yielded.
func (l *Log) Read(ctx context.Context, from, through int64) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if from < 0 || through < from {
			yield(Event{}, fmt.Errorf("read %s: invalid range %d..%d", l.loc, from, through))
			return
		}
		segs, err := l.listSegments(ctx)
		if err != nil {
			yield(Event{}, err)
			return
		}
		// The first segment that can hold from: the last one starting at
		// or before it.
		start := sort.Search(len(segs), func(i int) bool { return segs[i].first > from }) - 1
		end := sort.Search(len(segs), func(i int) bool { return segs[i].first > through })
		if start < 0 || start >= end {
			return
		}
		ahead := l.newReadAhead(ctx, segs[start:end])
		defer ahead.close()
		stopped := false
		for i := start; i < end; i++ {
			n, err := l.readRange(ctx, segs[i], ahead.take(i-start), from, through, func(e Event) bool {
				if !yield(e, nil) {
					stopped = true
				}
				return !stopped
			})
			if stopped {
				return
			}
			if err == nil && i+1 < len(segs) && segs[i].first+n != segs[i+1].first && segs[i].first+n <= through {
				err = boundaryError(segs[i], n, segs[i+1])
			}
			if err != nil {
				yield(Event{}, fmt.Errorf("read %s: %w", l.loc, err))
				return
			}
		}
	}
}

// readRange streams one segment, or scans its bytes when they were fetched
// ahead (data not nil), passing on the events in [from, through]. It
// returns how many events the segment holds, or how many it read before
// passing through.
func (l *Log) readRange(ctx context.Context, seg segment, data []byte, from, through int64, fn func(Event) bool) (int64, error) {
	// A retry starts the segment again; it resumes after what was already
	// yielded.
	pass := func(e Event) error {
		if e.Seq > through {
			return errStop
		}
		if e.Seq >= from {
			e.Line = bytes.Clone(e.Line)
			if !fn(e) {
				return errStop
			}
			from = e.Seq + 1
		}
		return nil
	}
	if data == nil {
		return l.streamSegment(ctx, seg, nil, pass)
	}
	n, err := seg.scan(bytes.NewReader(data), pass)
	if errors.Is(err, errStop) {
		return n, nil
	}
	return n, err
}
