package compare

import "github.com/turnlog/turnlog/internal/turnlog"

// prefix counts the events two logs share as they are read, holding no
// event: the shared part so far, cut at the last turn boundary, and the
// counts of the turn open there, which join it at the turn's end.
type prefix struct {
	shared Shared
	// inTurn: the last shared event is inside a turn, whose messages
	// open counts.
	inTurn   bool
	openTurn int64
	open     messageCount
}

func newPrefix() prefix {
	return prefix{shared: Shared{CutSeq: -1, LastTurnEndSeq: -1, SameThroughSeq: -1}}
}

// add takes the next event both logs hold.
func (p *prefix) add(e *turnlog.Event) {
	p.shared.SameThroughSeq = e.Seq
	switch {
	case e.Type == turnlog.TypeTurnStart:
		p.inTurn, p.openTurn, p.open = true, e.Turn, messageCount{}
	case p.inTurn:
		p.open.add(e)
		if e.Type == turnlog.TypeTurnEnd {
			end, _ := e.TurnEnd()
			p.closeTurn(e.Seq, string(end.Reason), true)
		}
	default:
		// Between turns: shared as soon as it is read.
		var c messageCount
		c.add(e)
		p.shared.Messages += c.total()
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
	s.Messages += p.open.total()
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

// messageCount counts the messages of one turn as the log has them: user
// messages, typed or inserted, tool results, and one assistant message
// per response that completed, the host's own message winning over the
// assembled one, as replay has it.
type messageCount struct {
	others int64
	// completed says, per response, whether it is a message; host marks
	// the responses the host wrote a message for.
	completed map[int]bool
	host      map[int]bool
}

func (c *messageCount) add(e *turnlog.Event) {
	switch e.Type {
	case turnlog.TypeUserMessage, turnlog.TypeContextMessage, turnlog.TypeToolResult:
		c.others++
	case turnlog.TypeResponseFinish:
		f, _ := e.ResponseFinish()
		if !c.host[f.Response] {
			c.set(f.Response, !f.StopReason.Interrupted())
		}
	case turnlog.TypeAssistantMessage:
		m, _ := e.AssistantMessage()
		if c.host == nil {
			c.host = map[int]bool{}
		}
		c.host[m.Response] = true
		c.set(m.Response, !m.Message.StopReason.Interrupted())
	}
}

func (c *messageCount) set(response int, message bool) {
	if c.completed == nil {
		c.completed = map[int]bool{}
	}
	c.completed[response] = message
}

func (c *messageCount) total() int64 {
	n := c.others
	for _, message := range c.completed {
		if message {
			n++
		}
	}
	return n
}
