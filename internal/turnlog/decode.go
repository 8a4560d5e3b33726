package turnlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"time"
	"unicode/utf8"
)

// absent marks an integer member the line did not contain; no valid value
// can be this negative.
const (
	absentSeq = math.MinInt64
	absentInt = math.MinInt
)

// wireEvent is the hot-path decoding target: the header and every known
// payload field, filled in one pass.
type wireEvent struct {
	Seq  int64  `json:"seq"`
	Type string `json:"type"`
	Turn int64  `json:"turn"`
	Time string `json:"time"`
	eventBody
}

// DecodeEvent decodes one line of a log. The event's Raw refers to line, not
// a copy. Problems are returned as a *LineError without a line number.
//
// Known types decode in one pass into concrete fields. If that fails — a
// malformed line, or a field that a newer host uses with another type on
// another event type — the line is decoded again type by type, which either
// accepts it (only the event type's own fields count; unknown types keep only
// their header) or names the exact field that is wrong.
func DecodeEvent(line []byte) (Event, error) {
	if !utf8.Valid(line) {
		return Event{}, invalidUTF8(line)
	}
	if jsonKind(line) != "an object" {
		return Event{}, lineErrorf(-1, ErrMalformed, "an event must be a JSON object, got %s", jsonKind(line))
	}
	w := wireEvent{Seq: absentSeq}
	w.Response, w.Block = absentInt, absentInt
	if err := unmarshalEvent(line, &w); err != nil {
		return decodeByType(line)
	}
	e := Event{Seq: w.Seq, Type: EventType(w.Type), Turn: w.Turn, Time: w.Time, Raw: line, body: w.eventBody}
	if err := e.check(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// decodeByType is the careful path of DecodeEvent.
func decodeByType(line []byte) (Event, error) {
	header := struct {
		Seq  int64  `json:"seq"`
		Type string `json:"type"`
		Turn int64  `json:"turn"`
		Time string `json:"time"`
	}{Seq: absentSeq}
	if err := json.Unmarshal(line, &header); err != nil {
		return Event{}, decodeError(header.Seq, err)
	}
	e := Event{Seq: header.Seq, Type: EventType(header.Type), Turn: header.Turn, Time: header.Time, Raw: line}
	e.body.Response, e.body.Block = absentInt, absentInt
	var err error
	switch e.Type {
	case TypeSessionStart:
		var p SessionStart
		err = json.Unmarshal(line, &p)
		e.body.Adapter = p.Adapter
	case TypeUserMessage:
		var p UserMessageEvent
		err = json.Unmarshal(line, &p)
		e.body.Content = p.Content
	case TypeResponseStart:
		p := ResponseStart{Response: absentInt}
		err = json.Unmarshal(line, &p)
		e.body.Response, e.body.Adapter = p.Response, p.Adapter
	case TypeChunk:
		p := Chunk{Response: absentInt, Block: absentInt}
		err = json.Unmarshal(line, &p)
		e.body.Response, e.body.Block, e.body.Delta = p.Response, p.Block, p.Delta
	case TypeResponseFinish:
		p := ResponseFinish{Response: absentInt}
		err = json.Unmarshal(line, &p)
		e.body.Response, e.body.StopReason, e.body.ReplayState, e.body.Usage = p.Response, p.StopReason, p.ReplayState, p.Usage
	case TypeAssistantMessage:
		p := struct {
			Response int               `json:"response"`
			Message  *AssistantMessage `json:"message"`
		}{Response: absentInt}
		err = json.Unmarshal(line, &p)
		e.body.Response, e.body.Message = p.Response, p.Message
	case TypeToolResult:
		var p ToolResultEvent
		err = json.Unmarshal(line, &p)
		e.body.ToolCallID, e.body.ToolName, e.body.Content, e.body.IsError = p.ToolCallID, p.ToolName, p.Content, p.IsError
		e.body.Details, e.body.Usage, e.body.NestedCalls, e.body.DurationMs = p.Details, p.Usage, p.NestedCalls, p.DurationMs
	case TypeSystemMessage:
		var p SystemMessageEvent
		err = json.Unmarshal(line, &p)
		e.body.Content, e.body.Sections, e.body.ToolsAdded, e.body.ToolsRemoved = p.Content, p.Sections, p.ToolsAdded, p.ToolsRemoved
	case TypeCompaction:
		var p Compaction
		err = json.Unmarshal(line, &p)
		e.body.Content, e.body.FirstKeptSeq, e.body.TokensBefore, e.body.SystemMessage = p.Content, p.FirstKeptSeq, p.TokensBefore, p.SystemMessage
	case TypeContextEdit:
		var p ContextEdit
		err = json.Unmarshal(line, &p)
		e.body.TargetSeq, e.body.Replacement = p.TargetSeq, p.Replacement
	case TypeContextMessage:
		var p ContextMessage
		err = json.Unmarshal(line, &p)
		e.body.Origin, e.body.Content = p.Origin, p.Content
	case TypeTurnEnd:
		var p TurnEnd
		err = json.Unmarshal(line, &p)
		e.body.Reason = p.Reason
	}
	if err != nil {
		if e.Type == TypeAssistantMessage {
			if _, ok := errors.AsType[*fieldError](err); ok {
				err = prefixField("message", err)
			}
		}
		return Event{}, decodeError(e.Seq, err)
	}
	if err := e.check(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// check applies the per-line rules: header values and the required fields of
// the event's type. It also normalises explicit nulls to absent.
func (e *Event) check() error {
	seq := e.Seq
	switch {
	case e.Seq == absentSeq:
		return lineErrorf(-1, ErrInvalidField, `missing field "seq"`)
	case e.Seq < 0:
		return lineErrorf(-1, ErrInvalidField, `field "seq": %d is negative`, e.Seq)
	case e.Type == "":
		return lineErrorf(seq, ErrInvalidField, `missing field "type"`)
	case e.Turn < 0:
		return lineErrorf(seq, ErrInvalidField, `field "turn": %d is negative`, e.Turn)
	}
	if e.Time != "" {
		if _, err := time.Parse(time.RFC3339Nano, e.Time); err != nil {
			return lineErrorf(seq, ErrInvalidField, `field "time": %q is not an RFC 3339 time`, e.Time)
		}
	}
	if !e.Type.Known() {
		e.body = eventBody{}
		return nil
	}
	b := &e.body
	// An explicit null content is kept: pi-ai 1.x reads it as no blocks,
	// 0.73 passes it on, so replay decides by the target's release line.
	b.ReplayState = nullToNil(b.ReplayState)
	b.Usage = nullToNil(b.Usage)
	for _, raw := range []*json.RawMessage{&b.Details, &b.NestedCalls, &b.DurationMs, &b.Sections, &b.ToolsAdded, &b.ToolsRemoved, &b.SystemMessage} {
		*raw = nullToNil(*raw)
	}
	return e.checkBody()
}

// missing is the error of a field e's type needs and e lacks.
func (e *Event) missing(field string) error {
	return lineErrorf(e.Seq, ErrInvalidField, "%s: missing field %q", e.Type, field)
}

// needResponse checks the response number of a response's event.
func (e *Event) needResponse() error {
	if e.body.Response == absentInt {
		return e.missing("response")
	}
	if e.body.Response < 0 {
		return lineErrorf(e.Seq, ErrInvalidField, `field "response": %d is negative`, e.body.Response)
	}
	return nil
}

// needContent checks an event's content: blocks, a string or null.
func (e *Event) needContent() error {
	switch jsonKind(e.body.Content) {
	case "nothing":
		return e.missing("content")
	case "an array", "a string", "null":
		return nil
	}
	return lineErrorf(e.Seq, ErrInvalidField, `field "content": want an array of blocks, a string or null, got %s`, jsonKind(e.body.Content))
}

// want checks that an optional field, if there, is of kind.
func (e *Event) want(field string, raw json.RawMessage, kind string) error {
	if k := jsonKind(raw); k != "nothing" && k != kind {
		return lineErrorf(e.Seq, ErrInvalidField, "field %q: want %s, got %s", field, kind, k)
	}
	return nil
}

// checkBody checks the fields e's (known) type needs.
func (e *Event) checkBody() error {
	b := &e.body
	switch e.Type {
	case TypeUserMessage:
		return e.needContent()
	case TypeResponseStart:
		return e.needResponse()
	case TypeChunk:
		if err := e.needResponse(); err != nil {
			return err
		}
		if b.Block == absentInt {
			return e.missing("block")
		}
		if b.Block < 0 {
			return lineErrorf(e.Seq, ErrInvalidField, `field "block": %d is negative`, b.Block)
		}
		if b.Delta.Type == "" {
			return e.missing("delta.type")
		}
	case TypeResponseFinish:
		if err := e.needResponse(); err != nil {
			return err
		}
		if b.StopReason == "" {
			return e.missing("stopReason")
		}
	case TypeAssistantMessage:
		if err := e.needResponse(); err != nil {
			return err
		}
		if b.Message == nil {
			return e.missing("message")
		}
	case TypeToolResult:
		if b.ToolCallID == "" {
			return e.missing("toolCallId")
		}
		return e.needContent()
	case TypeTurnEnd:
		if b.Reason == "" {
			return e.missing("reason")
		}
	case TypeSystemMessage:
		if err := e.needContent(); err != nil {
			return err
		}
		return checkSystemMembers("", b.Sections, b.ToolsAdded, b.ToolsRemoved, e.want)
	case TypeCompaction:
		return e.checkCompaction()
	case TypeContextEdit:
		return e.checkEdit()
	case TypeContextMessage:
		if b.Origin == "" {
			return e.missing("origin")
		}
		return e.needContent()
	}
	return nil
}

func (e *Event) checkCompaction() error {
	b := &e.body
	if err := e.needContent(); err != nil {
		return err
	}
	if err := e.needEarlierSeq("firstKeptSeq", b.FirstKeptSeq, true); err != nil {
		return err
	}
	if b.TokensBefore != nil && *b.TokensBefore < 0 {
		return lineErrorf(e.Seq, ErrInvalidField, `field "tokensBefore": %d is negative`, *b.TokensBefore)
	}
	if len(b.SystemMessage) > 0 {
		return checkSystemMessage(e.Seq, b.SystemMessage, e.want)
	}
	return nil
}

func (e *Event) checkEdit() error {
	b := &e.body
	if err := e.needEarlierSeq("targetSeq", b.TargetSeq, false); err != nil {
		return err
	}
	switch jsonKind(b.Replacement) {
	case "nothing":
		return e.missing("replacement")
	case "null":
	case "an object":
		var r struct {
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(b.Replacement, &r); err != nil || jsonKind(r.Content) == "nothing" {
			return lineErrorf(e.Seq, ErrInvalidField, `field "replacement": want {"content": …} or null, without content`)
		}
		if k := jsonKind(r.Content); k != "an array" && k != "a string" {
			return lineErrorf(e.Seq, ErrInvalidField, `field "replacement.content": want an array of blocks or a string, got %s`, k)
		}
	default:
		return lineErrorf(e.Seq, ErrInvalidField, `field "replacement": want {"content": …} or null, got %s`, jsonKind(b.Replacement))
	}
	return nil
}

// needEarlierSeq and the helpers below are the checks of the context
// events' members; check binds them to the event.
func (e *Event) needEarlierSeq(field string, v *int64, orSelf bool) error {
	switch {
	case v == nil:
		return lineErrorf(e.Seq, ErrInvalidField, "%s: missing field %q", e.Type, field)
	case *v < 0:
		return lineErrorf(e.Seq, ErrInvalidField, "field %q: %d is negative", field, *v)
	case *v > e.Seq || (*v == e.Seq && !orSelf):
		return lineErrorf(e.Seq, ErrInvalidField, "field %q: %d is not an earlier seq", field, *v)
	}
	return nil
}

// checkSystemMessage checks a compaction's systemMessage: the members of a
// system/message event, in an object.
func checkSystemMessage(seq int64, raw json.RawMessage, want func(string, json.RawMessage, string) error) error {
	var m struct {
		Content      json.RawMessage `json:"content"`
		Sections     json.RawMessage `json:"sections"`
		ToolsAdded   json.RawMessage `json:"toolsAdded"`
		ToolsRemoved json.RawMessage `json:"toolsRemoved"`
	}
	if jsonKind(raw) != "an object" || json.Unmarshal(raw, &m) != nil {
		return lineErrorf(seq, ErrInvalidField, `field "systemMessage": want an object, got %s`, jsonKind(raw))
	}
	switch jsonKind(m.Content) {
	case "an array", "a string", "null":
	default:
		return lineErrorf(seq, ErrInvalidField, `field "systemMessage.content": want an array of blocks, a string or null, got %s`, jsonKind(m.Content))
	}
	return checkSystemMembers("systemMessage.", nullToNil(m.Sections), nullToNil(m.ToolsAdded), nullToNil(m.ToolsRemoved), want)
}

func checkSystemMembers(prefix string, sections, added, removed json.RawMessage, want func(string, json.RawMessage, string) error) error {
	if err := want(prefix+"sections", sections, "an object"); err != nil {
		return err
	}
	if err := want(prefix+"toolsAdded", added, "an array"); err != nil {
		return err
	}
	return want(prefix+"toolsRemoved", removed, "an array")
}

func nullToNil(raw json.RawMessage) json.RawMessage {
	if bytes.Equal(raw, []byte("null")) {
		return nil
	}
	return raw
}

// decodeError turns an encoding/json error into a one-line message a user
// can act on: which field, what was expected, what was found.
func decodeError(seq int64, err error) *LineError {
	if seq == absentSeq || seq < 0 {
		seq = -1
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return lineErrorf(-1, ErrMalformed, "malformed JSON at byte %d: %v", se.Offset, se)
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return lineErrorf(seq, ErrInvalidField, "field %q: want %s, got %s", te.Field, goTypeName(te.Type), te.Value)
	}
	if fe, ok := errors.AsType[*fieldError](err); ok {
		return lineErrorf(seq, ErrInvalidField, "%v", fe)
	}
	return lineErrorf(seq, ErrMalformed, "%v", err)
}

func goTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return fmt.Sprint(t)
}
