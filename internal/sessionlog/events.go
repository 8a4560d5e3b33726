package sessionlog

import (
	"context"
	"fmt"
	"iter"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Events yields the log's events with from <= seq <= through, decoded and
// checked against the log format's rules as they are read (a log read
// from the middle is checked from where it starts). It is Read for a
// reader that wants events rather than stored lines. Iteration stops at
// the first error, which is yielded and names the seq.
func (l *Log) Events(ctx context.Context, from, through int64) iter.Seq2[turnlog.Event, error] {
	return func(yield func(turnlog.Event, error) bool) {
		v := turnlog.NewValidatorAt(from)
		for raw, err := range l.Read(ctx, from, through) {
			if err != nil {
				yield(turnlog.Event{}, err)
				return
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
