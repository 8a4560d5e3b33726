// Package turnlog defines the session turn log: its events, the pi-ai message
// shapes they carry, the replay envelope, and a streaming JSON Lines codec that
// checks the log's structure as it reads.
//
// Every decoded Event keeps the exact bytes it was read from, so a log written
// by a newer host — unknown event types, unknown fields — is copied, cut and
// written again without loss; typed accessors expose the fields this version
// knows. The package has no Kubernetes dependency: it is shared by the
// controllers, the worker pods and the offline CLI.
package turnlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// EventType names what an event records.
type EventType string

// The event types of the log. Types outside this list are kept and ignored.
const (
	TypeSessionStart     EventType = "session/start"
	TypeTurnStart        EventType = "turn/start"
	TypeUserMessage      EventType = "user/message"
	TypeResponseStart    EventType = "response/start"
	TypeChunk            EventType = "chunk"
	TypeResponseFinish   EventType = "response/finish"
	TypeAssistantMessage EventType = "assistant/message"
	TypeToolResult       EventType = "tool/result"
	TypeTurnEnd          EventType = "turn/end"
)

// Known reports whether this version of turnlog understands the type.
func (t EventType) Known() bool {
	switch t {
	case TypeSessionStart, TypeTurnStart, TypeUserMessage, TypeResponseStart, TypeChunk,
		TypeResponseFinish, TypeAssistantMessage, TypeToolResult, TypeTurnEnd:
		return true
	}
	return false
}

// StopReason is pi-ai's reason a response (or a turn) stopped.
type StopReason string

// pi-ai's stop reasons.
const (
	StopReasonStop    StopReason = "stop"
	StopReasonLength  StopReason = "length"
	StopReasonToolUse StopReason = "toolUse"
	StopReasonError   StopReason = "error"
	StopReasonAborted StopReason = "aborted"
)

// Interrupted reports whether the stream was cut rather than completed: such a
// response leaves frozen partial text and never becomes an assistant message.
func (r StopReason) Interrupted() bool {
	return r == StopReasonAborted || r == StopReasonError
}

// Adapter identifies the model endpoint a session or a response talks to.
type Adapter struct {
	Kind     string `json:"kind,omitempty"`
	API      string `json:"api,omitempty"`
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
}

// SameModel is pi-ai's rule for replaying a message natively: same api,
// provider and model. Kind is the reader's concern, not the model's.
func (a Adapter) SameModel(b Adapter) bool {
	return a.API == b.API && a.Provider == b.Provider && a.Model == b.Model
}

// Delta is one streamed piece of a content block. Type is "text" (Text),
// "thinking" (Thinking, Redacted) or "toolCall" (ID, Name, ArgumentsDelta).
type Delta struct {
	Type           string `json:"type"`
	Text           string `json:"text,omitempty"`
	Thinking       string `json:"thinking,omitempty"`
	Redacted       bool   `json:"redacted,omitempty"`
	ID             string `json:"id,omitempty"`
	Name           string `json:"name,omitempty"`
	ArgumentsDelta string `json:"argumentsDelta,omitempty"`
}

// Payload is the type-specific part of a known event.
type Payload interface {
	EventType() EventType
}

// SessionStart is the optional first event: the adapter the session was created for.
type SessionStart struct {
	Adapter Adapter `json:"adapter"`
}

// TurnStart opens a turn; it has no payload.
type TurnStart struct{}

// UserMessageEvent is a user message. Content is pi-ai content (an array of
// blocks, or a string) kept as written, because replay passes it on unchanged.
type UserMessageEvent struct {
	Content json.RawMessage `json:"content"`
}

// ResponseStart begins one model call of a turn.
type ResponseStart struct {
	Response int     `json:"response"`
	Adapter  Adapter `json:"adapter"`
}

// Chunk is one stream delta of a response's block (Block is 0-based, in
// emission order).
type Chunk struct {
	Response int   `json:"response"`
	Block    int   `json:"block"`
	Delta    Delta `json:"delta"`
}

// ResponseFinish closes a response. ReplayState is the adapter's replay state,
// normally a ReplayEnvelope; it is kept as written and interpreted by assembly
// and replay. Usage is pi-ai's token usage, passed on to the assembled message.
type ResponseFinish struct {
	Response    int             `json:"response"`
	StopReason  StopReason      `json:"stopReason"`
	ReplayState json.RawMessage `json:"replayState,omitempty"`
	Usage       json.RawMessage `json:"usage,omitempty"`
}

// AssistantMessageEvent is a durable assistant message written by a host that
// assembles in-process (and by legacy hosts). It wins over assembly of the
// same response.
type AssistantMessageEvent struct {
	Response int              `json:"response"`
	Message  AssistantMessage `json:"message"`
}

// ToolResultEvent is the result of a tool call. Content is kept as written.
type ToolResultEvent struct {
	ToolCallID string          `json:"toolCallId"`
	ToolName   string          `json:"toolName"`
	Content    json.RawMessage `json:"content"`
	IsError    bool            `json:"isError"`
}

// TurnEnd closes a turn; every turn ends with one, aborted turns included.
type TurnEnd struct {
	Reason StopReason `json:"reason"`
}

// EventType implementations tie each payload to its event type.
func (SessionStart) EventType() EventType          { return TypeSessionStart }
func (TurnStart) EventType() EventType             { return TypeTurnStart }
func (UserMessageEvent) EventType() EventType      { return TypeUserMessage }
func (ResponseStart) EventType() EventType         { return TypeResponseStart }
func (Chunk) EventType() EventType                 { return TypeChunk }
func (ResponseFinish) EventType() EventType        { return TypeResponseFinish }
func (AssistantMessageEvent) EventType() EventType { return TypeAssistantMessage }
func (ToolResultEvent) EventType() EventType       { return TypeToolResult }
func (TurnEnd) EventType() EventType               { return TypeTurnEnd }

// Event is one line of the log. Raw holds the exact bytes the event was
// decoded from (or encoded to), and is what a Writer writes: re-encoding never
// drops a field this version does not know.
type Event struct {
	Seq  int64
	Type EventType
	// Turn is the turn the event belongs to; 0 outside turns.
	Turn int64
	// Time is the event's RFC 3339 time as written; empty when absent.
	Time string
	Raw  json.RawMessage

	body eventBody
}

// eventBody holds the known payload fields of every event type side by side,
// so a line decodes in one pass into concrete fields with no per-event
// interface allocation; the accessors below read the ones of e.Type.
type eventBody struct {
	Adapter     Adapter           `json:"adapter"`
	Content     json.RawMessage   `json:"content"`
	Response    int               `json:"response"`
	Block       int               `json:"block"`
	Delta       Delta             `json:"delta"`
	StopReason  StopReason        `json:"stopReason"`
	ReplayState json.RawMessage   `json:"replayState"`
	Usage       json.RawMessage   `json:"usage"`
	Message     *AssistantMessage `json:"message"`
	ToolCallID  string            `json:"toolCallId"`
	ToolName    string            `json:"toolName"`
	IsError     bool              `json:"isError"`
	Reason      StopReason        `json:"reason"`
}

// SessionStart returns the payload of a session/start event.
func (e *Event) SessionStart() (SessionStart, bool) {
	if e.Type != TypeSessionStart {
		return SessionStart{}, false
	}
	return SessionStart{Adapter: e.body.Adapter}, true
}

// UserMessage returns the payload of a user/message event.
func (e *Event) UserMessage() (UserMessageEvent, bool) {
	if e.Type != TypeUserMessage {
		return UserMessageEvent{}, false
	}
	return UserMessageEvent{Content: e.body.Content}, true
}

// ResponseStart returns the payload of a response/start event.
func (e *Event) ResponseStart() (ResponseStart, bool) {
	if e.Type != TypeResponseStart {
		return ResponseStart{}, false
	}
	return ResponseStart{Response: e.body.Response, Adapter: e.body.Adapter}, true
}

// Chunk returns the payload of a chunk event.
func (e *Event) Chunk() (Chunk, bool) {
	if e.Type != TypeChunk {
		return Chunk{}, false
	}
	return Chunk{Response: e.body.Response, Block: e.body.Block, Delta: e.body.Delta}, true
}

// ResponseFinish returns the payload of a response/finish event.
func (e *Event) ResponseFinish() (ResponseFinish, bool) {
	if e.Type != TypeResponseFinish {
		return ResponseFinish{}, false
	}
	return ResponseFinish{
		Response:    e.body.Response,
		StopReason:  e.body.StopReason,
		ReplayState: e.body.ReplayState,
		Usage:       e.body.Usage,
	}, true
}

// AssistantMessage returns the payload of an assistant/message event.
func (e *Event) AssistantMessage() (AssistantMessageEvent, bool) {
	if e.Type != TypeAssistantMessage || e.body.Message == nil {
		return AssistantMessageEvent{}, false
	}
	return AssistantMessageEvent{Response: e.body.Response, Message: *e.body.Message}, true
}

// ToolResult returns the payload of a tool/result event.
func (e *Event) ToolResult() (ToolResultEvent, bool) {
	if e.Type != TypeToolResult {
		return ToolResultEvent{}, false
	}
	return ToolResultEvent{
		ToolCallID: e.body.ToolCallID,
		ToolName:   e.body.ToolName,
		Content:    e.body.Content,
		IsError:    e.body.IsError,
	}, true
}

// TurnEnd returns the payload of a turn/end event.
func (e *Event) TurnEnd() (TurnEnd, bool) {
	if e.Type != TypeTurnEnd {
		return TurnEnd{}, false
	}
	return TurnEnd{Reason: e.body.Reason}, true
}

// Payload returns the typed payload of a known event, nil for an unknown type.
func (e *Event) Payload() Payload {
	switch e.Type {
	case TypeSessionStart:
		p, _ := e.SessionStart()
		return p
	case TypeTurnStart:
		return TurnStart{}
	case TypeUserMessage:
		p, _ := e.UserMessage()
		return p
	case TypeResponseStart:
		p, _ := e.ResponseStart()
		return p
	case TypeChunk:
		p, _ := e.Chunk()
		return p
	case TypeResponseFinish:
		p, _ := e.ResponseFinish()
		return p
	case TypeAssistantMessage:
		p, _ := e.AssistantMessage()
		return p
	case TypeToolResult:
		p, _ := e.ToolResult()
		return p
	case TypeTurnEnd:
		p, _ := e.TurnEnd()
		return p
	}
	return nil
}

// NewEvent encodes a known event as a compact JSON object and decodes it back,
// so the result passes the same checks as an event read from a log. turn is 0
// for events outside turns; time is RFC 3339 or empty.
func NewEvent(seq, turn int64, time string, p Payload) (Event, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return Event{}, fmt.Errorf("turnlog: encode %s payload: %w", p.EventType(), err)
	}
	o := objectWriter{buf: make([]byte, 0, len(body)+64)}
	o.open()
	o.key("seq")
	o.buf = strconv.AppendInt(o.buf, seq, 10)
	o.string("type", string(p.EventType()))
	o.optInt("turn", turn)
	o.optString("time", time)
	if fields := bytes.TrimSpace(body[1 : len(body)-1]); len(fields) > 0 {
		o.buf = append(o.buf, ',')
		o.buf = append(o.buf, fields...)
	}
	o.close()
	return DecodeEvent(o.buf)
}
