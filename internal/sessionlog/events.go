package sessionlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Events yields the log's events with from <= seq <= through, decoded and
// checked against the log format's rules as they are read (a log read
// from the middle is checked from where it starts). It is Read for a
// reader that wants events rather than stored lines, and the one place
// where a log in the store becomes events. Iteration stops at the first
// error, which is yielded: an event that breaks the rules is a
// *turnlog.LineError naming its seq ("seq 12: turn/end with no open
// turn").
func (l *Log) Events(ctx context.Context, from, through int64) turnlog.Events {
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
				yield(turnlog.Event{}, atSeq(raw.Seq, err))
				return
			}
			if !yield(e, nil) {
				return
			}
		}
	}
}

// atSeq names the seq of the event a problem was found in: where its
// segment holds it, known even when the event could not be decoded.
func atSeq(seq int64, err error) error {
	if le, ok := errors.AsType[*turnlog.LineError](err); ok {
		le.Seq = seq
		return le
	}
	return fmt.Errorf("seq %d: %w", seq, err)
}
