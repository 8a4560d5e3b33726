package assembler

import "github.com/turnlog/turnlog/internal/turnlog"

// MessageCount counts the messages of a run of events as the log has them:
// user messages, typed or inserted, tool results, and one assistant
// message per response that completed, the host's own message winning
// over the assembled one, as replay has it. The responses are those of
// one turn: count each turn, and what comes between turns, apart.
type MessageCount struct {
	others int64
	// completed says, per response, whether it is a message; host marks
	// the responses the host wrote a message for.
	completed map[int]bool
	host      map[int]bool
}

// Add counts e.
func (c *MessageCount) Add(e *turnlog.Event) {
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

func (c *MessageCount) set(response int, message bool) {
	if c.completed == nil {
		c.completed = map[int]bool{}
	}
	c.completed[response] = message
}

// Total is how many messages the events counted hold.
func (c *MessageCount) Total() int64 {
	n := c.others
	for _, message := range c.completed {
		if message {
			n++
		}
	}
	return n
}
