package turnlog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Kinds of structural problems, for errors.Is on a *LineError.
var (
	// ErrMalformed: the line is not a JSON object (or is too long to read).
	ErrMalformed = errors.New("malformed event")
	// ErrInvalidField: a required field is missing or a field has the wrong type or value.
	ErrInvalidField = errors.New("invalid event field")
	// ErrSequence: a seq gap or a duplicate.
	ErrSequence = errors.New("seq out of sequence")
	// ErrTurnStructure: an event outside a turn, a turn/end with no open turn, …
	ErrTurnStructure = errors.New("broken turn structure")
)

// LineError is one structural problem of a log, located by line and seq:
//
//	line 12 (seq 11): turn/end with no open turn
type LineError struct {
	// Line is the 1-based line of the log file; 0 when the event did not come
	// from a file.
	Line int
	// Seq is the event's seq; -1 when it could not be read.
	Seq int64
	Err error
}

func (e *LineError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(e.Line))
		if e.Seq >= 0 {
			b.WriteString(" (seq ")
			b.WriteString(strconv.FormatInt(e.Seq, 10))
			b.WriteString(")")
		}
	} else if e.Seq >= 0 {
		b.WriteString("seq ")
		b.WriteString(strconv.FormatInt(e.Seq, 10))
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *LineError) Unwrap() error { return e.Err }

// problem is a message that unwraps to its kind, so messages stay specific
// while callers match on the kind.
type problem struct {
	kind error
	msg  string
}

func (p *problem) Error() string { return p.msg }
func (p *problem) Unwrap() error { return p.kind }

func lineErrorf(seq int64, kind error, format string, args ...any) *LineError {
	return &LineError{Seq: seq, Err: &problem{kind: kind, msg: fmt.Sprintf(format, args...)}}
}
