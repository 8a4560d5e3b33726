package agenthost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Event is one log event as a host writes it: a JSON object with a "type"
// and no "seq" (the log assigns seqs when the event is appended). Build
// events with the functions below, or wrap JSON with RawEvent.
type Event struct {
	typ  string
	data []byte
}

// Type returns the event's type, e.g. "turn/end".
func (e Event) Type() string { return e.typ }

// MarshalJSON returns the event's JSON.
func (e Event) MarshalJSON() ([]byte, error) { return e.data, nil }

// endsBatch reports whether the appender flushes at this event: a finished
// response and an ended turn are what a host must not lose.
func (e Event) endsBatch() bool {
	return e.typ == string(turnlog.TypeResponseFinish) || e.typ == string(turnlog.TypeTurnEnd)
}

// RawEvent wraps an event the host encoded itself. It must be a JSON object
// with a string "type" and without "seq"; any other member is kept as is,
// so a host can add its own (readers keep what they do not know).
func RawEvent(data []byte) (Event, error) {
	var h struct {
		Type *string         `json:"type"`
		Seq  json.RawMessage `json:"seq"`
	}
	d := bytes.TrimSpace(data)
	if len(d) == 0 || d[0] != '{' {
		return Event{}, fmt.Errorf("event: not a JSON object")
	}
	if err := json.Unmarshal(d, &h); err != nil {
		return Event{}, fmt.Errorf("event: %w", err)
	}
	switch {
	case h.Type == nil || *h.Type == "":
		return Event{}, fmt.Errorf(`event: no "type"`)
	case h.Seq != nil:
		return Event{}, fmt.Errorf(`event: has a "seq"; the log assigns seqs`)
	}
	return Event{typ: *h.Type, data: append([]byte(nil), d...)}, nil
}

// now is the time the builders stamp events with.
var now = func() time.Time { return time.Now() }

func stamp() string { return now().UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// build encodes a builder's event; the values are Go values of known JSON
// shapes, so encoding cannot fail short of a bug.
func build(typ turnlog.EventType, v any) Event {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("agenthost: encode %s event: %v", typ, err))
	}
	return Event{typ: string(typ), data: data}
}

type head struct {
	Type turnlog.EventType `json:"type"`
	Turn int64             `json:"turn,omitempty"`
	Time string            `json:"time,omitempty"`
}

func at(typ turnlog.EventType, turn int64) head { return head{Type: typ, Turn: turn, Time: stamp()} }

// SessionStart is the optional first event of a log: the adapter the
// session talks to, which replay targets by default.
func SessionStart(adapter Adapter) Event {
	return build(turnlog.TypeSessionStart, struct {
		head
		Adapter Adapter `json:"adapter"`
	}{at(turnlog.TypeSessionStart, 0), adapter})
}

// TurnStart opens turn turn (1, 2, ...: increasing from turn to turn).
func TurnStart(turn int64) Event {
	return build(turnlog.TypeTurnStart, at(turnlog.TypeTurnStart, turn))
}

// UserMessage is a user message of pi-ai content blocks.
func UserMessage(turn int64, content ...Block) Event {
	if content == nil {
		content = []Block{}
	}
	return build(turnlog.TypeUserMessage, struct {
		head
		Content []Block `json:"content"`
	}{at(turnlog.TypeUserMessage, turn), content})
}

// UserText is a user message of one text block.
func UserText(turn int64, text string) Event {
	return UserMessage(turn, Block{Type: turnlog.BlockText, Text: text})
}

// ResponseStart begins model call response (0, 1, ... within the turn).
func ResponseStart(turn int64, response int, adapter Adapter) Event {
	return build(turnlog.TypeResponseStart, struct {
		head
		Response int     `json:"response"`
		Adapter  Adapter `json:"adapter"`
	}{at(turnlog.TypeResponseStart, turn), response, adapter})
}

func chunk(turn int64, response, block int, delta turnlog.Delta) Event {
	return build(turnlog.TypeChunk, struct {
		head
		Response int           `json:"response"`
		Block    int           `json:"block"`
		Delta    turnlog.Delta `json:"delta"`
	}{at(turnlog.TypeChunk, turn), response, block, delta})
}

// TextDelta is a piece of text of block block (0-based, in the order the
// stream emitted blocks) — pi-ai's text_delta.
func TextDelta(turn int64, response, block int, text string) Event {
	return chunk(turn, response, block, turnlog.Delta{Type: turnlog.BlockText, Text: text})
}

// ThinkingDelta is a piece of reasoning — pi-ai's thinking_delta; redacted
// marks a block of opaque provider data.
func ThinkingDelta(turn int64, response, block int, thinking string, redacted bool) Event {
	return chunk(turn, response, block, turnlog.Delta{Type: turnlog.BlockThinking, Thinking: thinking, Redacted: redacted})
}

// ToolCallDelta is a piece of a tool call's JSON arguments — pi-ai's
// toolcall_delta. id and name are needed on the block's first delta.
func ToolCallDelta(turn int64, response, block int, id, name, argumentsDelta string) Event {
	return chunk(turn, response, block, turnlog.Delta{Type: turnlog.BlockToolCall, ID: id, Name: name, ArgumentsDelta: argumentsDelta})
}

// Envelope is pi-ai's version-2 replay state of one response: Response,
// opaque data about the response as a whole (its id, api, provider, model),
// and Blocks, one entry per block the stream emitted, index for index with
// the deltas' block numbers (nil for a block without state). Nil Blocks
// leaves the member out.
type Envelope struct {
	Response any
	Blocks   []*BlockState
}

// BlockState is the replay state of one emitted block: its Type and the
// provider's Signature.
type BlockState struct {
	Type      string `json:"type"`
	Signature string `json:"signature,omitempty"`
}

// MarshalJSON encodes the envelope as the log stores it.
func (e Envelope) MarshalJSON() ([]byte, error) {
	resp := e.Response
	if resp == nil {
		resp = struct{}{}
	}
	return json.Marshal(struct {
		Kind     string        `json:"kind"`
		Version  int           `json:"version"`
		Response any           `json:"response"`
		Blocks   []*BlockState `json:"blocks,omitempty"`
	}{turnlog.EnvelopeKindPiAI, 2, resp, e.Blocks})
}

// ResponseFinish closes response with pi-ai's stop reason; state, if not
// nil, is the response's replay state. A response that stopped with
// StopReasonAborted or StopReasonError never becomes history.
func ResponseFinish(turn int64, response int, stop StopReason, state *Envelope, usage any) Event {
	return build(turnlog.TypeResponseFinish, struct {
		head
		Response    int        `json:"response"`
		StopReason  StopReason `json:"stopReason"`
		ReplayState *Envelope  `json:"replayState,omitempty"`
		Usage       any        `json:"usage,omitempty"`
	}{at(turnlog.TypeResponseFinish, turn), response, stop, state, usage})
}

// AssistantMessageEvent is an assistant message the host assembled itself
// (for response response); it wins over turnlog's assembly of that
// response. Inline signatures are kept.
func AssistantMessageEvent(turn int64, response int, msg AssistantMessage) Event {
	return build(turnlog.TypeAssistantMessage, struct {
		head
		Response int              `json:"response"`
		Message  AssistantMessage `json:"message"`
	}{at(turnlog.TypeAssistantMessage, turn), response, msg})
}

// ToolResult is the result of tool call callID.
func ToolResult(turn int64, callID, toolName string, isError bool, content ...Block) Event {
	if content == nil {
		content = []Block{}
	}
	return build(turnlog.TypeToolResult, struct {
		head
		ToolCallID string  `json:"toolCallId"`
		ToolName   string  `json:"toolName"`
		Content    []Block `json:"content"`
		IsError    bool    `json:"isError"`
	}{at(turnlog.TypeToolResult, turn), callID, toolName, content, isError})
}

// TurnEnd closes turn; every turn ends with one, aborted turns too.
func TurnEnd(turn int64, reason StopReason) Event {
	return build(turnlog.TypeTurnEnd, struct {
		head
		Reason StopReason `json:"reason"`
	}{at(turnlog.TypeTurnEnd, turn), reason})
}

// SystemMessage is a change of the system prompt and tools, as a pi-ai 1.x
// system message: Content (a string or text blocks) adds instructions,
// Sections replace named prompt sections (a nil value removes one),
// ToolsAdded are complete tool definitions, ToolsRemoved name tools.
type SystemMessage struct {
	Content      any                `json:"content"`
	Sections     map[string]*string `json:"sections,omitempty"`
	ToolsAdded   []any              `json:"toolsAdded,omitempty"`
	ToolsRemoved []ToolRef          `json:"toolsRemoved,omitempty"`
}

// ToolRef names a tool.
type ToolRef struct {
	Name string `json:"name"`
}

func (m SystemMessage) orEmpty() SystemMessage {
	if m.Content == nil {
		m.Content = ""
	}
	return m
}

// SystemMessageEvent records a change of the system prompt and tools in
// turn turn, or between turns with turn 0.
func SystemMessageEvent(turn int64, m SystemMessage) Event {
	return build(turnlog.TypeSystemMessage, struct {
		head
		SystemMessage
	}{at(turnlog.TypeSystemMessage, turn), m.orEmpty()})
}

// Compaction replaces the history before firstKeptSeq with summary (user
// content, as the host sends it); system, if not nil, is the whole system
// prompt and tool state at the compaction, which replaces the system
// messages before it. firstKeptSeq is the seq of an earlier event that
// carries a message, or the compaction's own seq to keep nothing. turn is
// 0 between turns.
func Compaction(turn int64, summary []Block, firstKeptSeq, tokensBefore int64, system *SystemMessage) Event {
	if system != nil {
		s := system.orEmpty()
		system = &s
	}
	return build(turnlog.TypeCompaction, struct {
		head
		Content       []Block        `json:"content"`
		FirstKeptSeq  int64          `json:"firstKeptSeq"`
		TokensBefore  int64          `json:"tokensBefore"`
		SystemMessage *SystemMessage `json:"systemMessage,omitempty"`
	}{at(turnlog.TypeCompaction, turn), orNoBlocks(summary), firstKeptSeq, tokensBefore, system})
}

// ContextEdit replaces the content of the message of the event at
// targetSeq with replacement for the requests that follow, or, with a nil
// replacement, leaves the message out of them.
func ContextEdit(turn, targetSeq int64, replacement []Block) Event {
	var r any // JSON null: the message is left out
	if replacement != nil {
		r = struct {
			Content []Block `json:"content"`
		}{replacement}
	}
	return build(turnlog.TypeContextEdit, struct {
		head
		TargetSeq   int64 `json:"targetSeq"`
		Replacement any   `json:"replacement"`
	}{at(turnlog.TypeContextEdit, turn), targetSeq, r})
}

// ContextMessage is user-role context the host inserted — the output of a
// shell command it ran, an extension's message, a branch summary — with
// origin saying which (e.g. "bash", "extension:todo", "branchSummary").
func ContextMessage(turn int64, origin string, content ...Block) Event {
	return build(turnlog.TypeContextMessage, struct {
		head
		Origin  string  `json:"origin"`
		Content []Block `json:"content"`
	}{at(turnlog.TypeContextMessage, turn), origin, orNoBlocks(content)})
}

func orNoBlocks(b []Block) []Block {
	if b == nil {
		return []Block{}
	}
	return b
}
