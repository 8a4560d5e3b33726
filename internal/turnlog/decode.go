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
	for _, raw := range []*json.RawMessage{&b.Details, &b.NestedCalls, &b.DurationMs, &b.Sections, &b.ToolsAdded, &b.ToolsRemoved} {
		*raw = nullToNil(*raw)
	}
	missing := func(field string) error {
		return lineErrorf(seq, ErrInvalidField, "%s: missing field %q", e.Type, field)
	}
	needResponse := func() error {
		if b.Response == absentInt {
			return missing("response")
		}
		if b.Response < 0 {
			return lineErrorf(seq, ErrInvalidField, `field "response": %d is negative`, b.Response)
		}
		return nil
	}
	needContent := func() error {
		switch jsonKind(b.Content) {
		case "nothing":
			return missing("content")
		case "an array", "a string", "null":
			return nil
		}
		return lineErrorf(seq, ErrInvalidField, `field "content": want an array of blocks, a string or null, got %s`, jsonKind(b.Content))
	}
	want := func(field string, raw json.RawMessage, kind string) error {
		if k := jsonKind(raw); k != "nothing" && k != kind {
			return lineErrorf(seq, ErrInvalidField, "field %q: want %s, got %s", field, kind, k)
		}
		return nil
	}
	switch e.Type {
	case TypeUserMessage:
		return needContent()
	case TypeResponseStart:
		return needResponse()
	case TypeChunk:
		if err := needResponse(); err != nil {
			return err
		}
		if b.Block == absentInt {
			return missing("block")
		}
		if b.Block < 0 {
			return lineErrorf(seq, ErrInvalidField, `field "block": %d is negative`, b.Block)
		}
		if b.Delta.Type == "" {
			return missing("delta.type")
		}
	case TypeResponseFinish:
		if err := needResponse(); err != nil {
			return err
		}
		if b.StopReason == "" {
			return missing("stopReason")
		}
	case TypeAssistantMessage:
		if err := needResponse(); err != nil {
			return err
		}
		if b.Message == nil {
			return missing("message")
		}
	case TypeToolResult:
		if b.ToolCallID == "" {
			return missing("toolCallId")
		}
		return needContent()
	case TypeTurnEnd:
		if b.Reason == "" {
			return missing("reason")
		}
	case TypeSystemMessage:
		if err := needContent(); err != nil {
			return err
		}
		if err := want("sections", b.Sections, "an object"); err != nil {
			return err
		}
		if err := want("toolsAdded", b.ToolsAdded, "an array"); err != nil {
			return err
		}
		return want("toolsRemoved", b.ToolsRemoved, "an array")
	}
	return nil
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
