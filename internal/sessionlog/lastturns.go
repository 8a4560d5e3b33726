package sessionlog

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"slices"
	"sort"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// A reader that shows a long log a few turns at a time, from its end
// backwards (a session browser), needs "the last n turns before seq s"
// without reading the whole log. The layout answers that as it is: segment
// keys are seqs, so a listing says which segment holds s-1, and a turn is a
// run of consecutive seqs that begins with its turn/start. Reading segments
// backwards from there until n turn/starts have gone by reads only the
// segments that hold those turns, and no index beside the log is needed.

// LastTurns yields the events of the n turns that start last before seq
// before, and the events between turns that follow the last of them, in
// seq order: for a before past the head, the log's last n turns. A log
// with fewer turns before before yields all its events before before, from
// seq 0. It reads segments backwards from the one holding before-1 until
// it has seen n turn/starts, streaming each and keeping only the events of
// the turns still wanted, so it holds about n turns, however large the
// segments. Iteration stops at the first error, which is yielded.
func (l *Log) LastTurns(ctx context.Context, before int64, n int) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if n <= 0 {
			yield(Event{}, fmt.Errorf("read %s: the last %d turns: want at least one", l.loc, n))
			return
		}
		kept, err := l.lastTurns(ctx, before, n)
		if err != nil {
			yield(Event{}, fmt.Errorf("read %s: %w", l.loc, err))
			return
		}
		for i := len(kept) - 1; i >= 0; i-- {
			for _, e := range kept[i] {
				if !yield(e, nil) {
					return
				}
			}
		}
	}
}

// LastTurnEvents is LastTurns for a reader that wants events: each is
// decoded and checked against the log format's rules from the first one
// yielded on, as Events checks a log read from the middle.
func (l *Log) LastTurnEvents(ctx context.Context, before int64, n int) iter.Seq2[turnlog.Event, error] {
	return func(yield func(turnlog.Event, error) bool) {
		var v *turnlog.Validator
		for raw, err := range l.LastTurns(ctx, before, n) {
			if err != nil {
				yield(turnlog.Event{}, err)
				return
			}
			if v == nil {
				v = turnlog.NewValidatorAt(raw.Seq)
			}
			e, err := turnlog.DecodeEvent(raw.Line)
			if err == nil {
				err = v.Check(&e)
			}
			if err != nil {
				yield(turnlog.Event{}, fmt.Errorf("read %s: seq %d: %w", l.loc, raw.Seq, err))
				return
			}
			if !yield(e, nil) {
				return
			}
		}
	}
}

// lastTurns reads the segments backwards from the one holding before-1
// and returns, per segment read (the last one first), the events LastTurns
// yields.
func (l *Log) lastTurns(ctx context.Context, before int64, n int) ([][]Event, error) {
	if before <= 0 {
		return nil, nil
	}
	segs, err := l.listSegments(ctx)
	if err != nil {
		return nil, err
	}
	end := sort.Search(len(segs), func(i int) bool { return segs[i].first >= before })
	var kept [][]Event
	need := n
	for i := end - 1; i >= 0 && need > 0; i-- {
		tail := turnTail{want: need}
		read, err := l.streamSegment(ctx, segs[i], tail.reset, func(e Event) error {
			if e.Seq >= before {
				return errStop
			}
			tail.add(e)
			return nil
		})
		if err == nil && i+1 < len(segs) && segs[i].first+read != segs[i+1].first && segs[i].first+read < before {
			err = boundaryError(segs[i], read, segs[i+1])
		}
		if err != nil {
			return nil, err
		}
		need -= tail.finish()
		kept = append(kept, tail.events)
	}
	return kept, nil
}

// turnTail keeps what one segment contributes to the last turns: its
// events from the want-th last turn/start on, or all of them when it holds
// fewer turn/starts (then the turns before them are wanted too).
type turnTail struct {
	want   int
	events []Event
	// startAt are the indexes in events of the turn/starts kept.
	startAt []int
}

func (t *turnTail) reset() { t.events, t.startAt = nil, nil }

func (t *turnTail) add(e Event) {
	if e.Type == string(turnlog.TypeTurnStart) {
		t.startAt = append(t.startAt, len(t.events))
		if len(t.startAt) > t.want {
			// One turn too many: the oldest kept one, and what came
			// before it, are not wanted any more.
			drop := t.startAt[1]
			t.events = slices.Delete(t.events, 0, drop)
			t.startAt = t.startAt[1:]
			for i := range t.startAt {
				t.startAt[i] -= drop
			}
		}
	}
	e.Line = bytes.Clone(e.Line)
	t.events = append(t.events, e)
}

// finish returns how many turn/starts the segment contributed; when that
// is all that were wanted, what came before the first of them is dropped.
func (t *turnTail) finish() int {
	if len(t.startAt) == t.want {
		t.events = t.events[t.startAt[0]:]
	}
	return len(t.startAt)
}
