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
	"slices"
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
	// TypeSystemMessage changes the system prompt and tools in force (pi-ai
	// 1.x system messages); it may come inside a turn or between turns.
	TypeSystemMessage EventType = "system/message"
	// The context events say how the host's next request differs from
	// "every message so far". Like system/message they may come inside a
	// turn or between turns.
	//
	// TypeCompaction replaces the messages before FirstKeptSeq with a
	// summary; TypeContextEdit replaces or removes an earlier message's
	// content; TypeContextMessage is user-role context the host inserted
	// (a shell command's output, an extension's message, a branch summary).
	TypeCompaction     EventType = "context/compaction"
	TypeContextEdit    EventType = "context/edit"
	TypeContextMessage EventType = "context/message"
)

// AnyTurn reports whether events of the type may come between turns as well
// as inside one.
func (t EventType) AnyTurn() bool {
	switch t {
	case TypeSystemMessage, TypeCompaction, TypeContextEdit, TypeContextMessage:
		return true
	}
	return false
}

// Known reports whether this version of turnlog understands the type.
func (t EventType) Known() bool {
	switch t {
	case TypeSessionStart, TypeTurnStart, TypeUserMessage, TypeResponseStart, TypeChunk,
		TypeResponseFinish, TypeAssistantMessage, TypeToolResult, TypeTurnEnd, TypeSystemMessage,
		TypeCompaction, TypeContextEdit, TypeContextMessage:
		return true
	}
	return false
}

// StopReason is pi-ai's reason a response (or a turn) stopped.
type StopReason string

// pi-ai's stop reasons. Pending and Deferred are pi-ai 1.x's: a response
// still running, and one a provider delivers later (a batch); replay keeps
// both, as pi-ai does.
const (
	StopReasonStop     StopReason = "stop"
	StopReasonLength   StopReason = "length"
	StopReasonToolUse  StopReason = "toolUse"
	StopReasonError    StopReason = "error"
	StopReasonAborted  StopReason = "aborted"
	StopReasonPending  StopReason = "pending"
	StopReasonDeferred StopReason = "deferred"
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
	// ReleaseLine is the pi-ai release line whose rules replay follows for
	// this target: ReleaseLine1 or ReleaseLine073; empty means
	// DefaultReleaseLine. It says which pi reads the transcript, not which
	// model wrote a message.
	ReleaseLine string `json:"releaseLine,omitempty"`
	// RefusedBlocks says what replay does with a thinking block the
	// provider refused (docs/log-format.md, "Replay state the provider
	// refused"): RefusedBlocksKeep (empty) sends it again, as pi does,
	// RefusedBlocksDrop leaves it out of the transcript. It is a target's
	// option, set by a Session, never read from a log's session/start.
	RefusedBlocks string `json:"refusedBlocks,omitempty"`
}

// What replay does with refused blocks (Adapter.RefusedBlocks). These and
// the release lines below are the only definition of the choices: the
// Session API's enums repeat them as kubebuilder markers, and a test of
// internal/sessionio holds the generated CRDs to them.
const (
	RefusedBlocksKeep = "Keep"
	RefusedBlocksDrop = "Drop"
)

// RefusedBlocksChoices lists the values Adapter.RefusedBlocks may name.
var RefusedBlocksChoices = []string{RefusedBlocksKeep, RefusedBlocksDrop}

// Overridden returns a with every field that o sets in place of a's: a
// Session's target with the target flags of `turnlog transcript`.
func (a Adapter) Overridden(o Adapter) Adapter {
	for _, f := range []struct {
		dst *string
		v   string
	}{
		{&a.Kind, o.Kind}, {&a.API, o.API}, {&a.Provider, o.Provider}, {&a.Model, o.Model},
		{&a.ReleaseLine, o.ReleaseLine}, {&a.RefusedBlocks, o.RefusedBlocks},
	} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
	return a
}

// DropsRefused reports whether the target leaves refused blocks out.
func (a Adapter) DropsRefused() bool { return a.RefusedBlocks == RefusedBlocksDrop }

// CheckRefusedBlocks returns an error naming the choices when v is neither
// empty nor one of them.
func CheckRefusedBlocks(v string) error {
	if v == "" || slices.Contains(RefusedBlocksChoices, v) {
		return nil
	}
	return fmt.Errorf("refusedBlocks %q is not %q or %q", v, RefusedBlocksKeep, RefusedBlocksDrop)
}

// The pi-ai release lines replay follows. What differs between them is only
// what the line's own transformMessages does (docs/log-format.md).
const (
	// ReleaseLine1 is pi-ai 1.x (the @earendil-works packages): another
	// model's thinking is dropped, system messages pass through, null
	// content reads as no blocks.
	ReleaseLine1 = "1"
	// ReleaseLine073 is pi-ai 0.73 (the @mariozechner packages): another
	// model's thinking becomes text; there are no system messages.
	ReleaseLine073 = "0.73"
	// DefaultReleaseLine is the line of a target that names none.
	DefaultReleaseLine = ReleaseLine1
)

// ReleaseLines lists the release lines this version replays by.
var ReleaseLines = []string{ReleaseLine1, ReleaseLine073}

// Line returns the target's release line, DefaultReleaseLine if it names
// none.
func (a Adapter) Line() string {
	if a.ReleaseLine == "" {
		return DefaultReleaseLine
	}
	return a.ReleaseLine
}

// CheckReleaseLine returns an error naming the lines there are when line is
// neither empty nor one of them.
func CheckReleaseLine(line string) error {
	if line == "" || slices.Contains(ReleaseLines, line) {
		return nil
	}
	return fmt.Errorf("release line %q is not one turnlog replays by: want %q or %q", line, ReleaseLine1, ReleaseLine073)
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
// blocks, a string, or null) kept as written, because replay passes it on.
// It is required: a nil Content is left out of the event and refused, an
// explicit JSON null is kept.
type UserMessageEvent struct {
	Content json.RawMessage `json:"content,omitempty"`
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
// Details, Usage, NestedCalls and DurationMs are pi-ai's record of the tool
// run: not sent to a model, but part of the message a host resumes with, so
// replay passes them on.
type ToolResultEvent struct {
	ToolCallID  string          `json:"toolCallId"`
	ToolName    string          `json:"toolName"`
	Content     json.RawMessage `json:"content,omitempty"` // required, as a user message's
	IsError     bool            `json:"isError"`
	Details     json.RawMessage `json:"details,omitempty"`
	Usage       json.RawMessage `json:"usage,omitempty"`
	NestedCalls json.RawMessage `json:"nestedCalls,omitempty"`
	DurationMs  json.RawMessage `json:"durationMs,omitempty"`
}

// SystemMessageEvent changes the system prompt and tools in force, as a
// pi-ai 1.x system message does: Content adds instructions, Sections
// replace named prompt sections (null removes one), ToolsAdded and
// ToolsRemoved change the tool set. Every member is kept as written.
type SystemMessageEvent struct {
	Content      json.RawMessage `json:"content,omitempty"` // required, as a user message's
	Sections     json.RawMessage `json:"sections,omitempty"`
	ToolsAdded   json.RawMessage `json:"toolsAdded,omitempty"`
	ToolsRemoved json.RawMessage `json:"toolsRemoved,omitempty"`
}

// Compaction replaces the history before FirstKeptSeq: a transcript through
// it or any later seq is SystemMessage (if any), Content as a user message,
// the messages of the events from FirstKeptSeq on (system messages
// excepted: SystemMessage holds the whole prompt and tool state), then the
// messages after the compaction. FirstKeptSeq equal to the compaction's own
// seq keeps nothing.
type Compaction struct {
	// Content is the summary as the host sends it: user-role content.
	Content      json.RawMessage `json:"content,omitempty"` // required
	FirstKeptSeq *int64          `json:"firstKeptSeq,omitempty"`
	TokensBefore *int64          `json:"tokensBefore,omitempty"`
	// SystemMessage, if present, is the complete system prompt and tool
	// state at the compaction: a SystemMessageEvent's members.
	SystemMessage json.RawMessage `json:"systemMessage,omitempty"`
}

// ContextEdit changes an earlier message for the requests that follow it:
// Replacement is {"content": …}, or null to leave the message out.
type ContextEdit struct {
	TargetSeq   *int64          `json:"targetSeq,omitempty"`
	Replacement json.RawMessage `json:"replacement,omitempty"` // required; null removes
}

// ContextMessage is user-role context the host inserted; Origin says what
// made it (e.g. "bash", "extension:<type>", "branchSummary").
type ContextMessage struct {
	Origin  string          `json:"origin"`
	Content json.RawMessage `json:"content,omitempty"` // required
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
func (SystemMessageEvent) EventType() EventType    { return TypeSystemMessage }
func (Compaction) EventType() EventType            { return TypeCompaction }
func (ContextEdit) EventType() EventType           { return TypeContextEdit }
func (ContextMessage) EventType() EventType        { return TypeContextMessage }

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

	Details      json.RawMessage `json:"details"`
	NestedCalls  json.RawMessage `json:"nestedCalls"`
	DurationMs   json.RawMessage `json:"durationMs"`
	Sections     json.RawMessage `json:"sections"`
	ToolsAdded   json.RawMessage `json:"toolsAdded"`
	ToolsRemoved json.RawMessage `json:"toolsRemoved"`

	FirstKeptSeq  *int64          `json:"firstKeptSeq"`
	TokensBefore  *int64          `json:"tokensBefore"`
	SystemMessage json.RawMessage `json:"systemMessage"`
	TargetSeq     *int64          `json:"targetSeq"`
	Replacement   json.RawMessage `json:"replacement"`
	Origin        string          `json:"origin"`
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
		ToolCallID:  e.body.ToolCallID,
		ToolName:    e.body.ToolName,
		Content:     e.body.Content,
		IsError:     e.body.IsError,
		Details:     e.body.Details,
		Usage:       e.body.Usage,
		NestedCalls: e.body.NestedCalls,
		DurationMs:  e.body.DurationMs,
	}, true
}

// Compaction returns the payload of a context/compaction event.
func (e *Event) Compaction() (Compaction, bool) {
	if e.Type != TypeCompaction {
		return Compaction{}, false
	}
	return Compaction{Content: e.body.Content, FirstKeptSeq: e.body.FirstKeptSeq, TokensBefore: e.body.TokensBefore,
		SystemMessage: e.body.SystemMessage}, true
}

// ContextEdit returns the payload of a context/edit event.
func (e *Event) ContextEdit() (ContextEdit, bool) {
	if e.Type != TypeContextEdit {
		return ContextEdit{}, false
	}
	return ContextEdit{TargetSeq: e.body.TargetSeq, Replacement: e.body.Replacement}, true
}

// ContextMessage returns the payload of a context/message event.
func (e *Event) ContextMessage() (ContextMessage, bool) {
	if e.Type != TypeContextMessage {
		return ContextMessage{}, false
	}
	return ContextMessage{Origin: e.body.Origin, Content: e.body.Content}, true
}

// SystemMessage returns the payload of a system/message event.
func (e *Event) SystemMessage() (SystemMessageEvent, bool) {
	if e.Type != TypeSystemMessage {
		return SystemMessageEvent{}, false
	}
	return SystemMessageEvent{
		Content:      e.body.Content,
		Sections:     e.body.Sections,
		ToolsAdded:   e.body.ToolsAdded,
		ToolsRemoved: e.body.ToolsRemoved,
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
	case TypeSystemMessage:
		p, _ := e.SystemMessage()
		return p
	case TypeCompaction:
		p, _ := e.Compaction()
		return p
	case TypeContextEdit:
		p, _ := e.ContextEdit()
		return p
	case TypeContextMessage:
		p, _ := e.ContextMessage()
		return p
	}
	return nil
}

// NewEvent encodes a known event as a compact JSON object and decodes it back,
// so the result passes the same checks as an event read from a log. turn is 0
// for events outside turns; time is RFC 3339 or empty.
func NewEvent(seq, turn int64, time string, p Payload) (Event, error) {
	// Without HTML escaping: a system prompt's <tags> stay as the host wrote them.
	var encoded bytes.Buffer
	enc := json.NewEncoder(&encoded)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return Event{}, fmt.Errorf("turnlog: encode %s payload: %w", p.EventType(), err)
	}
	body := bytes.TrimSpace(encoded.Bytes())
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
