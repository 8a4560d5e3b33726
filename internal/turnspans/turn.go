package turnspans

import (
	"encoding/json"
	"time"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// turnState is what a turn's events said, as far as its spans need it.
type turnState struct {
	startSeq, endSeq int64
	number           int64
	reason           turnlog.StopReason
	// first and last are the earliest and latest event times of the turn;
	// at is the time of the event being read (its own, else the latest).
	first, last, at time.Time
	// responses in the order they started; byIndex finds one by its
	// response number.
	responses []*response
	byIndex   map[int]*response
	// results answer tool calls by id, in log order.
	results []*result
	// input is the turn's user messages' content; input and the blocks'
	// text are kept only when content is captured.
	input   []json.RawMessage
	capture bool
}

// response is one model call of the turn.
type response struct {
	seq, finishSeq int64
	index          int
	adapter        turnlog.Adapter
	start, finish  time.Time
	finished       bool
	stopReason     turnlog.StopReason
	usage          json.RawMessage
	// blocks are the response's content blocks by block number, as the
	// chunks streamed them or as a host-written message holds them.
	blocks map[int]*block
	order  []int
}

// block is one content block; text holds its text, thinking or tool
// arguments when content is captured.
type block struct {
	kind     string
	id, name string
	text     []byte
}

// result is a tool/result.
type result struct {
	seq     int64
	at      time.Time
	callID  string
	name    string
	isError bool
	content json.RawMessage
	used    bool
}

func newTurnState(e *turnlog.Event, opts Options) *turnState {
	t := &turnState{startSeq: e.Seq, number: e.Turn, byIndex: map[int]*response{}, capture: opts.CaptureContent}
	t.stamp(e)
	return t
}

// stamp moves the turn's clock to e's time, if it has one.
func (t *turnState) stamp(e *turnlog.Event) {
	if e.Time == "" {
		return
	}
	at, err := time.Parse(time.RFC3339Nano, e.Time)
	if err != nil {
		return
	}
	if t.first.IsZero() || at.Before(t.first) {
		t.first = at
	}
	if at.After(t.last) {
		t.last = at
	}
	t.at = at
}

// now is the time of the event just stamped: its own, else the latest
// the turn has seen.
func (t *turnState) now() time.Time {
	if t.at.IsZero() {
		return t.last
	}
	return t.at
}

func (t *turnState) add(e *turnlog.Event) {
	t.at = time.Time{}
	// A chunk's time places no span: the response's start and finish do,
	// and parsing the time of every chunk was most of the cost of a turn.
	if e.Type != turnlog.TypeChunk {
		t.stamp(e)
	}
	switch e.Type {
	case turnlog.TypeUserMessage:
		if p, ok := e.UserMessage(); ok && t.capture {
			t.input = append(t.input, p.Content)
		}
	case turnlog.TypeResponseStart:
		p, _ := e.ResponseStart()
		r := &response{seq: e.Seq, index: p.Response, adapter: p.Adapter, start: t.now(), blocks: map[int]*block{}}
		t.responses = append(t.responses, r)
		t.byIndex[p.Response] = r
	case turnlog.TypeChunk:
		p, _ := e.Chunk()
		if r := t.byIndex[p.Response]; r != nil && !r.finished {
			r.chunk(p, t.capture)
		}
	case turnlog.TypeResponseFinish:
		p, _ := e.ResponseFinish()
		if r := t.byIndex[p.Response]; r != nil {
			r.finished, r.finishSeq, r.finish = true, e.Seq, t.now()
			r.stopReason, r.usage = p.StopReason, p.Usage
		}
	case turnlog.TypeAssistantMessage:
		p, _ := e.AssistantMessage()
		t.hostMessage(e.Seq, p)
	case turnlog.TypeToolResult:
		p, _ := e.ToolResult()
		t.results = append(t.results, &result{seq: e.Seq, at: t.now(), callID: p.ToolCallID, name: p.ToolName,
			isError: p.IsError, content: p.Content})
	}
}

// end closes the turn at its turn/end.
func (t *turnState) end(e *turnlog.Event) {
	t.at = time.Time{}
	t.stamp(e)
	end, _ := e.TurnEnd()
	t.endSeq, t.reason = e.Seq, end.Reason
}

// hostMessage takes an assistant/message: the message a host assembled
// wins over the streamed response of the same number, as in replay.
func (t *turnState) hostMessage(seq int64, p turnlog.AssistantMessageEvent) {
	r := t.byIndex[p.Response]
	if r == nil {
		r = &response{seq: seq, index: p.Response, start: t.now()}
		t.responses = append(t.responses, r)
		t.byIndex[p.Response] = r
	}
	m := p.Message
	r.finished, r.finishSeq, r.finish = true, seq, t.now()
	r.stopReason, r.usage = m.StopReason, m.Usage
	r.adapter.API, r.adapter.Provider, r.adapter.Model = m.API, m.Provider, m.Model
	r.blocks, r.order = map[int]*block{}, nil
	for i, c := range m.Content {
		b := &block{kind: c.Type, id: c.ID, name: c.Name}
		r.blocks[i], r.order = b, append(r.order, i)
		if !t.capture {
			continue
		}
		switch c.Type {
		case turnlog.BlockText:
			b.text = []byte(c.Text)
		case turnlog.BlockThinking:
			b.text = []byte(c.Thinking)
		case turnlog.BlockToolCall:
			b.text = c.Arguments
		}
	}
}

// chunk adds a stream delta to its block.
func (r *response) chunk(c turnlog.Chunk, capture bool) {
	b := r.blocks[c.Block]
	if b == nil {
		b = &block{kind: c.Delta.Type}
		r.blocks[c.Block], r.order = b, append(r.order, c.Block)
	}
	if c.Delta.ID != "" {
		b.id = c.Delta.ID
	}
	if c.Delta.Name != "" {
		b.name = c.Delta.Name
	}
	if !capture {
		return
	}
	switch c.Delta.Type {
	case turnlog.BlockText:
		b.text = append(b.text, c.Delta.Text...)
	case turnlog.BlockThinking:
		b.text = append(b.text, c.Delta.Thinking...)
	case turnlog.BlockToolCall:
		b.text = append(b.text, c.Delta.ArgumentsDelta...)
	}
}
