package compare

import (
	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// prefix counts the events two logs share as they are read, holding no
// event: the shared part so far, cut at the last turn boundary, and the
// counts of the turn open there, which join it at the turn's end.
type prefix struct {
	shared Shared
	// inTurn: the last shared event is inside a turn, whose messages
	// open counts.
	inTurn   bool
	openTurn int64
	open     assembler.MessageCount
}

func newPrefix() prefix {
	return prefix{shared: Shared{CutSeq: -1, LastTurnEndSeq: -1, SameThroughSeq: -1}}
}

// prefixAt is the prefix of the events before st.Next, from the counts
// the assembly workers kept with st; ok is false when st has none, or does
// not end at a turn/end.
func prefixAt(st derived.AssemblyState) (prefix, bool) {
	end := st.Summary.LastTurnEnd
	if st.Prefix == nil || end == nil || end.Seq != st.Next-1 {
		return prefix{}, false
	}
	p := newPrefix()
	p.shared = Shared{CutSeq: end.Seq, SameThroughSeq: end.Seq, Turns: st.CommittedTurns, FirstTurn: st.Prefix.FirstTurn,
		LastTurn: end.Turn, LastTurnEndSeq: end.Seq, LastReason: string(end.Reason), Messages: st.Prefix.Messages}
	return p, true
}

// add takes the next event both logs hold.
func (p *prefix) add(e *turnlog.Event) {
	p.shared.SameThroughSeq = e.Seq
	switch {
	case e.Type == turnlog.TypeTurnStart:
		p.inTurn, p.openTurn, p.open = true, e.Turn, assembler.MessageCount{}
	case p.inTurn:
		p.open.Add(e)
		if e.Type == turnlog.TypeTurnEnd {
			end, _ := e.TurnEnd()
			p.closeTurn(e.Seq, string(end.Reason), true)
		}
	default:
		// Between turns: shared as soon as it is read.
		var c assembler.MessageCount
		c.Add(e)
		p.shared.Messages += c.Total()
		p.shared.CutSeq = e.Seq
	}
}

// closeTurn adds the open turn, whose last shared event is seq, to the
// shared part; ended: seq is its turn/end, which ended it for reason.
func (p *prefix) closeTurn(seq int64, reason string, ended bool) {
	s := &p.shared
	if s.Turns == 0 {
		s.FirstTurn = p.openTurn
	}
	s.Turns++
	s.LastTurn, s.LastReason = p.openTurn, reason
	s.Messages += p.open.Total()
	s.CutSeq = seq
	if ended {
		s.LastTurnEndSeq = seq
	}
	p.inTurn = false
}

// finish ends a prefix that is the whole of both logs: a turn still open
// in both is shared too.
func (p *prefix) finish() {
	if p.inTurn {
		p.closeTurn(p.shared.SameThroughSeq, "", false)
	}
}
