package turnlog

// Validator applies the log's structural rules to events in log order:
//
//   - seq is dense: each event's seq is the previous one's plus one;
//   - every event but session/start, system/message, the context/ events
//     and unknown types belongs to a turn opened by turn/start and closed
//     by turn/end, and carries that turn's number (≥ 1, increasing from
//     turn to turn); those may also come between turns, with no turn
//     number;
//   - session/start, if present, is the first event;
//   - a compaction's firstKeptSeq and an edit's targetSeq name an earlier
//     event that carries a message (when that event was checked by the
//     same Validator).
//
// It keeps a few integers of state and one bit per event checked (which
// events carry a message), so checking a log costs an eighth of a byte per
// event.
// After reporting a problem it carries on from the event it was given, so a
// single fault is reported once rather than on every following line.
type Validator struct {
	next      int64 // the seq the next event must have
	first     bool  // no event checked yet
	turnKnown bool  // whether openTurn is known (false when resuming mid-log)
	openTurn  int64 // 0 when no turn is open
	lastTurn  int64

	base     int64    // the seq of the first event checked
	messages []uint64 // bit seq-base: the event carries a message
}

// NewValidator checks a whole log: the first event has seq 0 and no turn is
// open before it.
func NewValidator() *Validator {
	return &Validator{first: true, turnKnown: true}
}

// carriesMessage reports whether events of type t are, or make, a message
// of the transcript: what a compaction may keep from and an edit may change.
func carriesMessage(t EventType) bool {
	switch t {
	case TypeUserMessage, TypeAssistantMessage, TypeResponseFinish, TypeToolResult,
		TypeSystemMessage, TypeContextMessage, TypeCompaction:
		return true
	}
	return false
}

func (v *Validator) markMessage(seq int64) {
	i := seq - v.base
	if i >= int64(len(v.messages))*64+64 {
		return // past a seq gap, already reported: no room for the seqs missing
	}
	for int64(len(v.messages))*64 <= i {
		v.messages = append(v.messages, 0)
	}
	v.messages[i/64] |= 1 << (i % 64)
}

// checkReference reports a reference to an event this Validator saw that
// carries no message; references before its first event are not known.
func (v *Validator) checkReference(e *Event, field string, ref int64) error {
	i := ref - v.base
	if ref == e.Seq || i < 0 {
		return nil
	}
	if int64(len(v.messages))*64 > i && v.messages[i/64]&(1<<(i%64)) != 0 {
		return nil
	}
	return lineErrorf(e.Seq, ErrInvalidField, "%s: field %q: seq %d carries no message", e.Type, field, ref)
}

// NewValidatorAt checks a log read from the middle, starting at seq nextSeq.
// Whether a turn is open there is learnt from the first event's turn number.
func NewValidatorAt(nextSeq int64) *Validator {
	return &Validator{next: nextSeq, first: true, turnKnown: nextSeq == 0}
}

// Skip accounts for a line that could not be decoded, assuming it held the
// next seq, so a corrupt line is reported once and not again as a gap.
func (v *Validator) Skip() {
	v.next++
	v.first = false
}

// Check applies the rules to the next event. The error, if any, is a
// *LineError without a line number.
func (v *Validator) Check(e *Event) error {
	if v.first {
		v.base = e.Seq
	}
	err := v.checkOrder(e)
	if err == nil {
		switch e.Type {
		case TypeCompaction:
			p, _ := e.Compaction()
			err = v.checkReference(e, "firstKeptSeq", *p.FirstKeptSeq)
		case TypeContextEdit:
			p, _ := e.ContextEdit()
			err = v.checkReference(e, "targetSeq", *p.TargetSeq)
		}
	}
	if e.Seq >= v.base && carriesMessage(e.Type) {
		v.markMessage(e.Seq)
	}
	return err
}

func (v *Validator) checkOrder(e *Event) error {
	first := v.first
	v.first = false
	switch {
	case e.Seq < v.next:
		// A repeated event changes nothing: its turn effects already happened.
		return lineErrorf(e.Seq, ErrSequence, "duplicate or out-of-order seq: want %d", v.next)
	case e.Seq > v.next:
		missing := e.Seq - v.next
		want := v.next
		v.next = e.Seq + 1
		v.applyTurn(e, first) // keep the turn structure in step; its faults would be noise here
		return lineErrorf(e.Seq, ErrSequence, "seq gap: want %d, %d event(s) missing", want, missing)
	}
	v.next = e.Seq + 1
	return v.applyTurn(e, first)
}

func (v *Validator) applyTurn(e *Event, first bool) error {
	fail := func(format string, args ...any) error {
		return lineErrorf(e.Seq, ErrTurnStructure, format, args...)
	}
	if !v.turnKnown && e.Type.Known() && e.Type != TypeSessionStart {
		// Resuming mid-log: the first known event tells whether a turn is open.
		v.turnKnown = true
		if e.Type != TypeTurnStart && e.Turn >= 1 {
			v.openTurn, v.lastTurn = e.Turn, e.Turn
		}
	}
	switch e.Type {
	case TypeSessionStart:
		if !first || e.Seq != 0 {
			return fail("session/start must be the first event of the log")
		}
	case TypeTurnStart:
		open := v.openTurn
		prev := v.lastTurn
		v.openTurn = e.Turn
		if e.Turn > v.lastTurn {
			v.lastTurn = e.Turn
		}
		switch {
		case open != 0:
			return fail("turn/start while turn %d is open", open)
		case e.Turn < 1:
			return fail("turn/start needs a turn number ≥ 1")
		case e.Turn <= prev:
			return fail("turn %d does not come after turn %d", e.Turn, prev)
		}
	case TypeTurnEnd:
		open := v.openTurn
		v.openTurn = 0
		switch {
		case open == 0:
			return fail("turn/end with no open turn")
		case e.Turn != open:
			return fail("turn/end of turn %d while turn %d is open", e.Turn, open)
		}
	default:
		if !e.Type.Known() {
			return nil
		}
		if e.Type.AnyTurn() && v.openTurn == 0 {
			// The system prompt, tools and context may change between turns too.
			if e.Turn != 0 {
				return fail("%s between turns has turn %d; between turns it carries none", e.Type, e.Turn)
			}
			return nil
		}
		switch {
		case v.openTurn == 0:
			return fail("%s outside a turn (no turn/start before it)", e.Type)
		case e.Turn != v.openTurn:
			return fail("%s has turn %d, but the open turn is %d", e.Type, e.Turn, v.openTurn)
		}
	}
	return nil
}
