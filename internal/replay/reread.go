package replay

import (
	"bytes"
	"fmt"

	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// A context event that needs messages the context no longer holds (see
// "The context events" in context.go) reads the log again, from a turn
// boundary at or before where the context it builds starts, into a
// projection: the messages the log holds there, as replay converts them,
// and the compactions and edits among them. The context is then built from
// the projection as pi-coding-agent builds it (buildSessionContext), and
// passed through the emit steps.

// projection is a stretch of the log read again: its messages in log order
// (a response that never completed as a roleInterrupted mark), its last
// compaction and its edits, up to and including the context event that
// reads it.
type projection struct {
	through    int64
	messages   []Message
	compaction *turnItem
	edits      []turnItem
}

// add takes in one item of a turn the builder flushes.
func (p *projection) add(b *Builder, it turnItem) {
	if it.seq > p.through {
		return // after the context event: the builder adds it itself
	}
	switch it.role {
	case "compaction":
		c := it
		p.compaction = &c
	case "edit":
		p.edits = append(p.edits, it)
	case "assistant":
		if it.assistant.StopReason.Interrupted() {
			p.messages = append(p.messages, Message{Seq: it.seq, Role: roleInterrupted})
			return
		}
		msg, mode := b.convert(it.seq, *it.assistant)
		p.messages = append(p.messages, encode(Message{Seq: it.seq, Role: "assistant", Replay: mode}, msg))
	case "toolResult":
		p.messages = append(p.messages, b.toolResultMessage(it))
	case "user", "context":
		p.messages = append(p.messages, b.userMessage(Message{Seq: it.seq, Role: "user", Origin: it.origin}, it.userContent, it.time))
	case "system":
		if b.target.Line() != turnlog.ReleaseLine073 {
			p.messages = append(p.messages, b.systemMessage(Message{Seq: it.seq, Role: "system"}, it.system, it.time))
		}
	}
}

// rebuildFromLog replaces the transcript with the context as it stands
// after the context event it, read from the log from seq from on. It
// reports whether it did; if not, Err says why.
func (b *Builder) rebuildFromLog(it turnItem, from int64) bool {
	what := "edit"
	if it.role == "compaction" {
		what = "compaction"
	}
	if b.err != nil {
		return false
	}
	if b.opts.Reread == nil {
		b.err = fmt.Errorf("the %s at seq %d needs messages the context no longer holds, and this replay cannot read the log again", what, it.seq)
		return false
	}
	// The stored transcript is loaded first, as for any change to it: its
	// diagnostics stay with the rebuilt one (see Options.Prior).
	if !b.loadPrior() {
		return false
	}
	p, err := b.readProjection(from, it.seq)
	if err != nil {
		b.err = fmt.Errorf("read the log again from seq %d for the %s at seq %d: %w", from, what, it.seq, err)
		return false
	}
	first, context, state := b.projected(p, it.seq)
	b.restart(first, context)
	b.ctx = state
	return true
}

// readProjection reads the log from a turn boundary at or before from
// through the context event at seq through (and the rest of its turn, so
// that a host's own message replaces an assembled one as it does in a
// whole replay).
func (b *Builder) readProjection(from, through int64) (*projection, error) {
	start, err := b.turnBoundary(from)
	if err != nil {
		return nil, err
	}
	inner := &Builder{
		opts:      Options{Through: b.opts.Through},
		target:    b.target,
		assembler: assembler.New(turnlog.Adapter{}),
		result:    Result{ThroughSeq: -1, Context: ContextInfo{CompactionSeq: -1}},
		collect:   &projection{through: through},
	}
	inTurn := false
	for e, err := range b.reread(start) {
		if err != nil {
			return nil, err
		}
		if e.Seq > b.opts.Through {
			break
		}
		inner.Add(&e)
		switch e.Type {
		case turnlog.TypeTurnStart:
			inTurn = true
		case turnlog.TypeTurnEnd:
			inTurn = false
		}
		if e.Seq >= through && !inTurn {
			break
		}
	}
	inner.flushTurn()
	if got := inner.result.ThroughSeq; got < through {
		return nil, fmt.Errorf("read from seq %d, the log ends at seq %d, before seq %d", start, got, through)
	}
	return inner.collect, nil
}

// turnBoundary finds a seq at or before from where no turn is open, so that
// every message from from on is read whole: an assembled response's seq is
// its response/finish, its stream starts before. It reads back from from,
// twice as far each time.
func (b *Builder) turnBoundary(from int64) (int64, error) {
	if from <= 0 {
		return 0, nil
	}
	for back := int64(64); ; back *= 2 {
		lo := max(0, from-back)
		found := int64(-1)
		for e, err := range b.reread(lo) {
			if err != nil {
				return 0, err
			}
			if e.Seq > from {
				break
			}
			// Outside a turn an event of a known type carries no turn
			// number (an unknown one may carry none anywhere).
			if e.Type == turnlog.TypeTurnStart || (e.Turn == 0 && e.Type.Known()) {
				found = e.Seq
			}
		}
		switch {
		case found >= 0:
			return found, nil
		case lo == 0:
			return 0, nil
		}
	}
}

// projected builds the context as pi-coding-agent does from a projection
// read for the context event at seq current: the last compaction's
// messages, the messages from its first kept seq up to it but for system
// messages, then the messages after it; each with the latest edit among
// those (a replacement that does not fit its message counts as no edit,
// and is reported if it is the current event).
func (b *Builder) projected(p *projection, current int64) (first, context []Message, state ContextState) {
	compactionSeq := int64(-1)
	if c := p.compaction; c != nil {
		first = b.compactionMessages(*c)
		compactionSeq, state.KeptFrom = c.seq, *c.compaction.FirstKeptSeq
	}
	edits := map[int64][]turnItem{}
	for _, e := range p.edits {
		if e.seq >= state.KeptFrom { // pi reads the edits among the context's entries
			target := *e.edit.TargetSeq
			edits[target] = append(edits[target], e)
		}
	}
	// latest applies the latest edit of m that fits it; kept is false when
	// that edit leaves m out.
	latest := func(m Message) (out Message, kept bool) {
		list := edits[m.Seq]
		for i := len(list) - 1; i >= 0; i-- {
			replacement := list[i].replacement()
			switch {
			case replacement == nil:
				return m, false
			case m.Role == roleInterrupted:
				return m, true // an edited response that never completed is still one
			}
			if out, err := b.replaceContent(m, *replacement); err == nil {
				return out, true
			} else if list[i].seq == current {
				b.diagnose(Diagnostic{Code: CodeInvalidContextEvent, Seq: current,
					Message: fmt.Sprintf("the edit of seq %d cannot be applied: %v; seq %d is replayed as it was", m.Seq, err, m.Seq)})
			}
		}
		return m, true
	}
	if compactionSeq >= 0 {
		if _, kept := latest(Message{Seq: compactionSeq, Origin: OriginCompaction}); !kept {
			first = nil
			state.Removed = append(state.Removed, compactionSeq)
		}
	}
	for _, m := range p.messages {
		if compactionSeq >= 0 && (m.Seq < state.KeptFrom || (m.Seq < compactionSeq && m.Role == "system")) {
			continue
		}
		out, kept := latest(m)
		if !kept {
			state.Removed = append(state.Removed, m.Seq)
			continue
		}
		context = append(context, out)
	}
	return first, context, state
}

// reread yields the log's events from seq from on, read again through
// Options.Reread.
func (b *Builder) reread(from int64) turnlog.Events {
	return func(yield func(turnlog.Event, error) bool) {
		for e, err := range b.opts.Reread(from) {
			if err == nil && e.Seq < from {
				continue
			}
			if !yield(e, err) {
				return
			}
		}
	}
}

// RereadBytes is an Options.Reread for a log held in memory.
func RereadBytes(log []byte) func(from int64) turnlog.Events {
	return func(int64) turnlog.Events {
		return turnlog.NewReader(bytes.NewReader(log)).All()
	}
}
