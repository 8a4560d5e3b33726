package turnlog_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/turnlog"
)

func TestDecodeEventPayloads(t *testing.T) {
	tests := []struct {
		line string
		want turnlog.Payload
	}{
		{`{"seq":0,"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude"}}`,
			turnlog.SessionStart{Adapter: turnlog.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude"}}},
		{`{"seq":1,"type":"turn/start","turn":1}`, turnlog.TurnStart{}},
		{`{"seq":2,"type":"user/message","turn":1,"content":[{"type":"text","text":"hi"}]}`,
			turnlog.UserMessageEvent{Content: json.RawMessage(`[{"type":"text","text":"hi"}]`)}},
		{`{"seq":2,"type":"user/message","turn":1,"content":"plain"}`,
			turnlog.UserMessageEvent{Content: json.RawMessage(`"plain"`)}},
		{`{"seq":3,"type":"response/start","turn":1,"response":0,"adapter":{"api":"a","provider":"p","model":"m"}}`,
			turnlog.ResponseStart{Response: 0, Adapter: turnlog.Adapter{API: "a", Provider: "p", Model: "m"}}},
		{`{"seq":4,"type":"chunk","turn":1,"response":0,"block":2,"delta":{"type":"toolCall","id":"t1","name":"grep","argumentsDelta":"{\"a\""}}`,
			turnlog.Chunk{Block: 2, Delta: turnlog.Delta{Type: "toolCall", ID: "t1", Name: "grep", ArgumentsDelta: `{"a"`}}},
		{`{"seq":4,"type":"chunk","turn":1,"response":1,"block":0,"delta":{"type":"thinking","thinking":"x","redacted":true}}`,
			turnlog.Chunk{Response: 1, Delta: turnlog.Delta{Type: "thinking", Thinking: "x", Redacted: true}}},
		{`{"seq":5,"type":"response/finish","turn":1,"response":0,"stopReason":"length","replayState":{"kind":"pi-ai"}}`,
			turnlog.ResponseFinish{StopReason: "length", ReplayState: json.RawMessage(`{"kind":"pi-ai"}`)}},
		{`{"seq":5,"type":"response/finish","turn":1,"response":0,"stopReason":"stop","replayState":null}`,
			turnlog.ResponseFinish{StopReason: "stop"}},
		{`{"seq":6,"type":"assistant/message","turn":1,"response":0,"message":{"role":"assistant","content":[{"type":"text","text":"ok"}],"api":"a","provider":"p","model":"m","stopReason":"stop","timestamp":5}}`,
			turnlog.AssistantMessageEvent{Message: turnlog.AssistantMessage{
				Content: []turnlog.ContentBlock{{Type: "text", Text: "ok"}}, API: "a", Provider: "p", Model: "m", StopReason: "stop", Timestamp: 5}}},
		{`{"seq":7,"type":"tool/result","turn":1,"toolCallId":"t1","toolName":"grep","content":[],"isError":true}`,
			turnlog.ToolResultEvent{ToolCallID: "t1", ToolName: "grep", Content: json.RawMessage(`[]`), IsError: true}},
		{`{"seq":8,"type":"turn/end","turn":1,"reason":"aborted"}`, turnlog.TurnEnd{Reason: "aborted"}},
		// A newer host's fields are kept in Raw and do not disturb the known ones,
		// even when a field of another event type has another JSON type here.
		{`{"seq":8,"type":"turn/end","turn":1,"reason":"stop","message":"stopped by user","response":{"id":"x"},"block":"b"}`,
			turnlog.TurnEnd{Reason: "stop"}},
		{`{"seq":9,"type":"ui/annotation","note":{"deep":[1,2]},"response":"not an int"}`, nil},
	}
	for _, tt := range tests {
		e, err := turnlog.DecodeEvent([]byte(tt.line))
		if err != nil {
			t.Errorf("DecodeEvent(%s): %v", tt.line, err)
			continue
		}
		if got := e.Payload(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DecodeEvent(%s).Payload() =\n  %#v\nwant\n  %#v", tt.line, got, tt.want)
		}
		if string(e.Raw) != tt.line {
			t.Errorf("Raw = %s, want the line unchanged", e.Raw)
		}
	}
}

func TestDecodeEventHeader(t *testing.T) {
	e, err := turnlog.DecodeEvent([]byte(`{"seq":41,"type":"chunk","turn":7,"time":"2026-12-02T10:00:00.5+01:00","response":0,"block":0,"delta":{"type":"text","text":"a"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if e.Seq != 41 || e.Type != turnlog.TypeChunk || e.Turn != 7 || e.Time != "2026-12-02T10:00:00.5+01:00" {
		t.Errorf("header = %d %s %d %s", e.Seq, e.Type, e.Turn, e.Time)
	}
}

func TestDecodeEventErrors(t *testing.T) {
	tests := []struct {
		line string
		kind error
		want string
	}{
		{`{"seq":1,"type":"turn/start"`, turnlog.ErrMalformed, "malformed JSON"},
		{`[1,2]`, turnlog.ErrMalformed, "must be a JSON object, got an array"},
		{`null`, turnlog.ErrMalformed, "must be a JSON object, got null"},
		{`{"type":"turn/start","turn":1}`, turnlog.ErrInvalidField, `missing field "seq"`},
		{`{"seq":-1,"type":"turn/start","turn":1}`, turnlog.ErrInvalidField, `field "seq": -1 is negative`},
		{`{"seq":1.5,"type":"turn/start","turn":1}`, turnlog.ErrInvalidField, `field "seq": want an integer, got number 1.5`},
		{`{"seq":"3","type":"turn/start","turn":1}`, turnlog.ErrInvalidField, `field "seq": want an integer, got string`},
		{`{"seq":3,"turn":1}`, turnlog.ErrInvalidField, `seq 3: missing field "type"`},
		{`{"seq":3,"type":7}`, turnlog.ErrInvalidField, `field "type": want a string, got number`},
		{`{"seq":3,"type":"turn/start","turn":-2}`, turnlog.ErrInvalidField, `field "turn": -2 is negative`},
		{`{"seq":3,"type":"turn/start","turn":1,"time":"yesterday"}`, turnlog.ErrInvalidField, `field "time": "yesterday" is not an RFC 3339 time`},
		{`{"seq":3,"type":"chunk","turn":1,"response":0,"delta":{"type":"text"}}`, turnlog.ErrInvalidField, `seq 3: chunk: missing field "block"`},
		{`{"seq":3,"type":"chunk","turn":1,"response":0,"block":"b","delta":{"type":"text"}}`, turnlog.ErrInvalidField, `field "block": want an integer, got string`},
		{`{"seq":3,"type":"chunk","turn":1,"response":0,"block":1,"delta":{"text":"x"}}`, turnlog.ErrInvalidField, `missing field "delta.type"`},
		{`{"seq":3,"type":"chunk","turn":1,"response":-1,"block":1,"delta":{"type":"text"}}`, turnlog.ErrInvalidField, `field "response": -1 is negative`},
		{`{"seq":3,"type":"response/finish","turn":1,"response":0}`, turnlog.ErrInvalidField, `missing field "stopReason"`},
		{`{"seq":3,"type":"user/message","turn":1}`, turnlog.ErrInvalidField, `user/message: missing field "content"`},
		{`{"seq":3,"type":"user/message","turn":1,"content":{"type":"text"}}`, turnlog.ErrInvalidField, `field "content": want an array of blocks, a string or null, got an object`},
		{`{"seq":3,"type":"system/message","content":"x","sections":["a"]}`, turnlog.ErrInvalidField, `field "sections": want an object, got an array`},
		{`{"seq":3,"type":"system/message","content":"x","toolsAdded":{}}`, turnlog.ErrInvalidField, `field "toolsAdded": want an array, got an object`},
		{`{"seq":3,"type":"system/message"}`, turnlog.ErrInvalidField, `system/message: missing field "content"`},
		{`{"seq":3,"type":"tool/result","turn":1,"content":[]}`, turnlog.ErrInvalidField, `missing field "toolCallId"`},
		{`{"seq":3,"type":"turn/end","turn":1}`, turnlog.ErrInvalidField, `turn/end: missing field "reason"`},
		{`{"seq":3,"type":"assistant/message","turn":1,"response":0}`, turnlog.ErrInvalidField, `missing field "message"`},
		{`{"seq":3,"type":"assistant/message","turn":1,"response":0,"message":{"content":[{"type":"toolCall","arguments":"{}"}]}}`,
			turnlog.ErrInvalidField, `field "message.content[0].arguments": want an object, got a string`},
		{`{"seq":3,"type":"assistant/message","turn":1,"response":0,"message":{"role":"user","content":[]}}`,
			turnlog.ErrInvalidField, `field "message.role": want "assistant", got "user"`},
	}
	for _, tt := range tests {
		_, err := turnlog.DecodeEvent([]byte(tt.line))
		if err == nil {
			t.Errorf("DecodeEvent(%s) succeeded, want error %q", tt.line, tt.want)
			continue
		}
		if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodeEvent(%s) = %q (kind %v), want %q (kind %v)", tt.line, err, errors.Unwrap(errors.Unwrap(err)), tt.want, tt.kind)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("DecodeEvent(%s) error spans lines: %q", tt.line, err)
		}
	}
}

func TestNewEventRoundTrip(t *testing.T) {
	payloads := []turnlog.Payload{
		turnlog.SessionStart{Adapter: turnlog.Adapter{Kind: "pi-ai", Model: "m"}},
		turnlog.TurnStart{},
		turnlog.Chunk{Response: 1, Block: 3, Delta: turnlog.Delta{Type: "text", Text: "a\"b\n"}},
		turnlog.ResponseFinish{Response: 1, StopReason: "toolUse", ReplayState: json.RawMessage(`{"kind":"pi-ai","version":2}`)},
		turnlog.AssistantMessageEvent{Response: 2, Message: turnlog.AssistantMessage{
			Content:    []turnlog.ContentBlock{{Type: "thinking", Thinking: "t", Redacted: true}, {Type: "toolCall", ID: "c", Name: "n", Arguments: json.RawMessage(`{"x":1}`)}},
			StopReason: "toolUse", Extra: map[string]json.RawMessage{"responseId": json.RawMessage(`"r1"`)}}},
		turnlog.ToolResultEvent{ToolCallID: "c", ToolName: "n", Content: json.RawMessage(`[{"type":"text","text":"out"}]`)},
		turnlog.ToolResultEvent{ToolCallID: "c", ToolName: "n", Content: json.RawMessage(`null`), Details: json.RawMessage(`{"exitCode":0}`),
			Usage: json.RawMessage(`{"input":1}`), NestedCalls: json.RawMessage(`{"calls":[],"complete":true}`), DurationMs: json.RawMessage(`12`)},
		turnlog.UserMessageEvent{Content: json.RawMessage(`null`)},
		turnlog.SystemMessageEvent{Content: json.RawMessage(`"Be brief."`), Sections: json.RawMessage(`{"env":"<env/>","old":null}`),
			ToolsAdded: json.RawMessage(`[{"name":"grep"}]`), ToolsRemoved: json.RawMessage(`[{"name":"ls"}]`)},
		turnlog.TurnEnd{Reason: "stop"},
	}
	for i, p := range payloads {
		e, err := turnlog.NewEvent(int64(i), 1, "2026-12-02T10:00:00Z", p)
		if err != nil {
			t.Fatalf("NewEvent(%#v): %v", p, err)
		}
		if !reflect.DeepEqual(e.Payload(), p) {
			t.Errorf("NewEvent(%#v) decodes to %#v", p, e.Payload())
		}
		if e.Seq != int64(i) || e.Type != p.EventType() || e.Turn != 1 || e.Time != "2026-12-02T10:00:00Z" {
			t.Errorf("NewEvent header = %d %s %d %q", e.Seq, e.Type, e.Turn, e.Time)
		}
	}
	if _, err := turnlog.NewEvent(0, 1, "", turnlog.UserMessageEvent{}); err == nil {
		t.Error("NewEvent accepted a user/message without content")
	}
}
