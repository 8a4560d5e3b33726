// Package forkcut finds where a fork cuts its source log.
//
// A fork names a position with atSeq, a non-negative decimal: a UI renders
// the frozen node of an interrupted turn at turnEnd.seq - 0.9, between the
// turn's last event and its turn/end. atSeq is floored once, here, to an
// integer anchor seq. Because every turn opens with turn/start, flooring never
// leaves the anchor's turn, and the cut — the first turn/end at or after the
// anchor — closes that very turn. The child log is the source's events 0..cut:
// whole turns, aborted ones included.
package forkcut

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Errors a caller tells apart with errors.Is.
var (
	// ErrInvalidAtSeq: atSeq is not a non-negative decimal.
	ErrInvalidAtSeq = errors.New("invalid atSeq")
	// ErrAnchorBeyondHead: the anchor is past the last event of the log; a
	// terminal failure.
	ErrAnchorBeyondHead = errors.New("anchor beyond the log's head")
	// ErrTurnNotEnded: the anchor's turn has no turn/end yet; the fork waits.
	ErrTurnNotEnded = errors.New("the anchor's turn has not ended yet")
)

// Limits on atSeq: a seq fits in 19 digits, and no UI renders more
// fraction digits than a float64 holds. The CRD's CEL rule on
// spec.atSeq accepts exactly what ParseAtSeq accepts (the API suite walks
// the edge cases through both).
const (
	maxIntegerDigits  = 19
	maxFractionDigits = 40
)

// Point is where a fork cuts its source.
type Point struct {
	AtSeq     string             `json:"atSeq"`
	AnchorSeq int64              `json:"anchorSeq"`
	CutSeq    int64              `json:"cutSeq"`
	CutTurn   int64              `json:"cutTurn"`
	CutReason turnlog.StopReason `json:"cutReason"`
	// CompactionSeq is the last compaction through the cut: the child's
	// transcript starts from its summary. Absent: the child is uncompacted.
	CompactionSeq *int64 `json:"compactionSeq,omitempty"`
	// SystemSeqs are the events whose system messages the child starts
	// with, in order: the compaction's own, if it carries one, and the
	// system/message events after it (all of them, without a compaction).
	SystemSeqs []int64 `json:"systemSeqs,omitempty"`
}

// CutError is a fork that cannot cut (yet). It unwraps to
// ErrAnchorBeyondHead or ErrTurnNotEnded.
type CutError struct {
	Err    error
	AtSeq  string
	Anchor int64
	// Head is the seq of the log's last event; -1 for an empty log.
	Head int64
}

func (e *CutError) Error() string {
	if errors.Is(e.Err, ErrAnchorBeyondHead) {
		if e.Head < 0 {
			return fmt.Sprintf("atSeq %q: anchor seq %d is beyond the head of an empty log", e.AtSeq, e.Anchor)
		}
		return fmt.Sprintf("atSeq %q: anchor seq %d is beyond the log's head (seq %d)", e.AtSeq, e.Anchor, e.Head)
	}
	return fmt.Sprintf("atSeq %q: no turn/end at or after anchor seq %d yet (head is seq %d); the turn has not ended", e.AtSeq, e.Anchor, e.Head)
}

func (e *CutError) Unwrap() error { return e.Err }

// invalidAtSeqError says what is wrong with an atSeq, in the user's terms.
type invalidAtSeqError struct {
	atSeq, why string
}

func (e *invalidAtSeqError) Error() string        { return fmt.Sprintf("atSeq %q: %s", e.atSeq, e.why) }
func (e *invalidAtSeqError) Is(target error) bool { return target == ErrInvalidAtSeq }

// ParseAtSeq floors atSeq to the anchor seq. The floor is taken on the
// decimal string itself, so no float rounding can move it: "41.9999999999999999999"
// is 41.
func ParseAtSeq(atSeq string) (int64, error) {
	invalid := func(why string) error {
		return &invalidAtSeqError{atSeq: atSeq, why: why}
	}
	integer, fraction, hasPoint := strings.Cut(atSeq, ".")
	if !isDigits(integer) || (hasPoint && !isDigits(fraction)) {
		return 0, invalid(`must be a non-negative decimal such as "41" or "41.1"`)
	}
	if len(integer) > maxIntegerDigits {
		return 0, invalid(fmt.Sprintf("more than %d integer digits", maxIntegerDigits))
	}
	if len(fraction) > maxFractionDigits {
		return 0, invalid(fmt.Sprintf("more than %d fraction digits", maxFractionDigits))
	}
	anchor, err := strconv.ParseInt(integer, 10, 64)
	if err != nil {
		return 0, invalid("beyond the largest possible seq")
	}
	return anchor, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Find reads a log's events, from the first, up to the cut for atSeq; it
// never reads past the cut, so a long log costs only the prefix it keeps.
func Find(events turnlog.Events, atSeq string) (Point, error) {
	anchor, err := ParseAtSeq(atSeq)
	if err != nil {
		return Point{}, err
	}
	p := Point{AtSeq: atSeq, AnchorSeq: anchor}
	head := int64(-1)
	for e, err := range events {
		if err != nil {
			return Point{}, err
		}
		head = e.Seq
		switch e.Type {
		case turnlog.TypeCompaction:
			c, _ := e.Compaction()
			seq := e.Seq
			p.CompactionSeq, p.SystemSeqs = &seq, nil
			if len(c.SystemMessage) > 0 {
				p.SystemSeqs = []int64{seq}
			}
		case turnlog.TypeSystemMessage:
			p.SystemSeqs = append(p.SystemSeqs, e.Seq)
		}
		if end, ok := e.TurnEnd(); ok && e.Seq >= anchor {
			p.CutSeq, p.CutTurn, p.CutReason = e.Seq, e.Turn, end.Reason
			return p, nil
		}
	}
	cerr := &CutError{Err: ErrTurnNotEnded, AtSeq: atSeq, Anchor: anchor, Head: head}
	if anchor > head {
		cerr.Err = ErrAnchorBeyondHead
	}
	return Point{}, cerr
}

// WriteChild writes the child's log: the events through the cut, each
// event's bytes unchanged. events must be the log Find read.
func WriteChild(events turnlog.Events, w *turnlog.Writer, p Point) error {
	for e, err := range events {
		if err != nil {
			return err
		}
		if err := w.Write(e); err != nil {
			return err
		}
		if e.Seq == p.CutSeq {
			if e.Type != turnlog.TypeTurnEnd {
				return fmt.Errorf("forkcut: seq %d is a %s, not the turn/end the cut was found at", e.Seq, e.Type)
			}
			return w.Flush()
		}
	}
	return fmt.Errorf("forkcut: log ended before the cut at seq %d", p.CutSeq)
}
