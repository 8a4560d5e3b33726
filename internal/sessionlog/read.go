package sessionlog

import (
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
	// Segments is the number of segment objects.
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
// seen a turn/end (or the start of the log).
func (l *Log) Head(ctx context.Context) (HeadInfo, error) {
	segs, err := l.listSegments(ctx)
	if err != nil {
		return HeadInfo{}, err
	}
	if len(segs) == 0 {
		return HeadInfo{}, nil
	}
	var tail [][]Event // segments read, last first
	i := len(segs) - 1
	for ; i >= 0; i-- {
		_, events, err := l.readSegment(ctx, segs[i])
		if err != nil {
			return HeadInfo{}, fmt.Errorf("head of %s: %w", l.loc, err)
		}
		if i+1 < len(segs) && segs[i].first+int64(len(events)) != segs[i+1].first {
			return HeadInfo{}, fmt.Errorf("head of %s: %w", l.loc, boundaryError(segs[i], int64(len(events)), segs[i+1]))
		}
		tail = append(tail, events)
		if hasTurnEnd(events) {
			break
		}
	}
	last := segs[len(segs)-1]
	h := HeadInfo{Next: last.first + int64(len(tail[0])), Segments: len(segs)}
	for j := len(tail) - 1; j >= 0; j-- {
		for _, e := range tail[j] {
			h.fold(e)
		}
	}
	return h, nil
}

func hasTurnEnd(events []Event) bool {
	for _, e := range events {
		if e.Type == "turn/end" {
			return true
		}
	}
	return false
}

func (h *HeadInfo) fold(e Event) {
	h.Turns = max(h.Turns, e.Turn)
	switch e.Type {
	case "turn/start":
		h.TurnOpen = true
	case "turn/end":
		h.TurnOpen = false
		h.LastTurnEnd = &TurnEnd{Seq: e.Seq, Turn: e.Turn, Reason: e.Reason}
	}
}

func boundaryError(seg segment, n int64, next segment) error {
	end := seg.first + n
	if end < next.first {
		return &DataError{Key: next.key, Msg: fmt.Sprintf("gap: the previous segment ends at seq %d", end-1)}
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
		i := sort.Search(len(segs), func(i int) bool { return segs[i].first > from }) - 1
		stopped := false
		for ; i >= 0 && i < len(segs) && segs[i].first <= through; i++ {
			n, err := l.readRange(ctx, segs[i], from, through, func(e Event) bool {
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

// readRange streams one segment, passing on the events in [from, through].
// It returns how many events the segment holds, or how many it read before
// passing through.
func (l *Log) readRange(ctx context.Context, seg segment, from, through int64, fn func(Event) bool) (int64, error) {
	var n int64
	err := retry(ctx, func() error {
		r, err := l.b.NewRangeReader(ctx, seg.key, 0, -1)
		if err != nil {
			return err
		}
		defer r.Close()
		delivered := from // a retry resumes after what was already yielded
		n, err = scanSegment(r, seg.key, seg.first, func(e Event) error {
			if e.Seq > through {
				return errStop
			}
			if e.Seq >= delivered {
				if !fn(e) {
					return errStop
				}
				from = e.Seq + 1
			}
			return nil
		})
		return err
	})
	if errors.Is(err, errStop) {
		return n, nil
	}
	return n, err
}
