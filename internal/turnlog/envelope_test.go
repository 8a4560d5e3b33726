package turnlog_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/turnlog/turnlog/internal/turnlog"
)

func TestParseReplayEnvelope(t *testing.T) {
	tests := []struct {
		raw       string
		kind      string
		version   int64
		entries   []turnlog.BlockEntry // nil: no blocks member
		wantField string               // field of the first problem; "-" for none
	}{
		{`{"kind":"pi-ai","version":2,"response":{"id":"r"},"blocks":[{"type":"thinking","signature":"s"},null,{"type":"text","x":1}]}`,
			"pi-ai", 2, []turnlog.BlockEntry{{Type: "thinking", Signature: "s"}, {}, {Type: "text"}}, "-"},
		{`{"kind":"pi-ai","version":2}`, "pi-ai", 2, nil, "-"},
		{`{"thinkingSignatures":["a"]}`, "", 0, nil, "-"},
		{`[]`, "", 0, nil, ""},
		{`{"kind":1,"version":2,"blocks":[null]}`, "", 2, []turnlog.BlockEntry{{}}, "kind"},
		{`{"kind":"pi-ai","version":2.5}`, "pi-ai", 0, nil, "version"},
		{`{"kind":"pi-ai","version":2,"response":"r"}`, "pi-ai", 2, nil, "response"},
		{`{"kind":"pi-ai","version":2,"blocks":"x"}`, "pi-ai", 2, nil, "blocks"},
		{`{"kind":"pi-ai","version":2,"blocks":[null,"sig"]}`, "pi-ai", 2, nil, "blocks[1]"},
		{`{"kind":"pi-ai","version":2,"blocks":[{"signature":"s"}]}`, "pi-ai", 2, nil, "blocks[0].type"},
		{`{"kind":"pi-ai","version":2,"blocks":[{"type":"text","signature":7}]}`, "pi-ai", 2, nil, "blocks[0].signature"},
	}
	for _, tt := range tests {
		env, err := turnlog.ParseReplayEnvelope([]byte(tt.raw))
		field := "-"
		if err != nil {
			perr, ok := errors.AsType[*turnlog.EnvelopeError](err)
			if !ok {
				t.Fatalf("%s: error %T, want *EnvelopeError", tt.raw, err)
			}
			field = perr.Field
		}
		if field != tt.wantField {
			t.Errorf("%s: problem at %q (%v), want %q", tt.raw, field, err, tt.wantField)
		}
		if env.Kind != tt.kind || env.Version != tt.version {
			t.Errorf("%s: kind %q version %d, want %q %d", tt.raw, env.Kind, env.Version, tt.kind, tt.version)
		}
		if tt.entries != nil && !reflect.DeepEqual(env.Blocks, tt.entries) {
			t.Errorf("%s: entries %+v, want %+v", tt.raw, env.Blocks, tt.entries)
		}
	}
}

func TestKeepBlocksLeavesOtherMembersAsWritten(t *testing.T) {
	raw := `{"version":2,"blocks":[{"type":"thinking","signature":"a"}, null ,{"type":"toolCall","signature":"c"}],"kind":"pi-ai","response":{"z":1,"a":[true]},"x-new":"kept"}`
	env, err := turnlog.ParseReplayEnvelope([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	got, err := env.KeepBlocks([]bool{true, true, false})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":2,"blocks":[{"type":"thinking","signature":"a"},null],"kind":"pi-ai","response":{"z":1,"a":[true]},"x-new":"kept"}`
	if string(got) != want {
		t.Errorf("KeepBlocks =\n  %s\nwant\n  %s", got, want)
	}
	if _, err := env.KeepBlocks([]bool{true}); err == nil {
		t.Error("KeepBlocks accepted the wrong number of flags")
	}
}

func TestMessagesRoundTripUnknownMembers(t *testing.T) {
	tests := []string{
		`{"role":"assistant","content":[{"type":"thinking","thinking":"t","thinkingSignature":"s","redacted":true},{"type":"text","text":"a\nb \u2028 <>","textSignature":"x","cache_control":{"type":"ephemeral"}},{"type":"toolCall","id":"c","name":"n","arguments":{"q":[1,2]},"thoughtSignature":"g"},{"type":"image","data":"aGk=","mimeType":"image/png"},{"type":"audio","data":"x"}],"api":"a","provider":"p","model":"m","usage":{"input":1},"stopReason":"toolUse","errorMessage":"e","timestamp":17,"replayState":{"kind":"pi-ai"},"responseId":"r","x-host":[null]}`,
		`{"role":"assistant","content":[],"api":"","provider":"","model":"","stopReason":"stop"}`,
	}
	for _, raw := range tests {
		var m turnlog.AssistantMessage
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		got, err := m.MarshalJSON() // json.Marshal would HTML-escape < and >
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != raw {
			t.Errorf("round trip changed the message:\n  %s\nwant\n  %s", got, raw)
		}
	}
	user, _ := turnlog.UserMessage{Content: json.RawMessage(`[ {"type":"text", "text":"a b"} ]`), Timestamp: 5}.MarshalJSON()
	if string(user) != `{"role":"user","content":[{"type":"text","text":"a b"}],"timestamp":5}` {
		t.Errorf("user message %s", user)
	}
	result, _ := turnlog.ToolResultMessage{ToolCallID: "c", ToolName: "n", Content: json.RawMessage(`"ok"`)}.MarshalJSON()
	if string(result) != `{"role":"toolResult","toolCallId":"c","toolName":"n","content":"ok","isError":false}` {
		t.Errorf("tool result %s", result)
	}
}

func TestContentBlockStringEscaping(t *testing.T) {
	text := "quote \" backslash \\ tab \t nul \x00 bad \xff sep \u2029 é 😀"
	b, err := json.Marshal(turnlog.ContentBlock{Type: "text", Text: text})
	if err != nil {
		t.Fatal(err)
	}
	var back turnlog.ContentBlock
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%s does not decode: %v", b, err)
	}
	if want := "quote \" backslash \\ tab \t nul \x00 bad \ufffd sep \u2029 é 😀"; back.Text != want {
		t.Errorf("text %q, want %q", back.Text, want)
	}
}

// The envelopes adapters write are read by the single-pass scanner, not the
// general path, and the scanner reads them as the general path does.
func TestScannerReadsAdapterEnvelopes(t *testing.T) {
	for _, raw := range envelopeSeeds[:3] {
		scanned, ok := turnlog.ScanEnvelope([]byte(raw))
		if !ok {
			t.Errorf("scanner gave up on %s", raw)
			continue
		}
		parsed, err := turnlog.ParseEnvelope([]byte(raw))
		if err != nil || !reflect.DeepEqual(scanned, parsed) {
			t.Errorf("%s: scanner read %+v, the general path %+v (%v)", raw, scanned, parsed, err)
		}
	}
}

// Raw content is copied as written when it is compact, and compacted when it
// is not; spaces and quotes inside strings, escaped or not, are content.
func TestRawContentCompaction(t *testing.T) {
	tests := []struct{ raw, want string }{
		{`[{"type":"text","text":"say \"hi\" to them"}]`, `[{"type":"text","text":"say \"hi\" to them"}]`},
		{`["a\\", "b"]`, `["a\\","b"]`},
		{`["\\\" x",1]`, `["\\\" x",1]`},
		{`["tab\tin string"] `, `["tab\tin string"]`},
	}
	for _, tt := range tests {
		got, err := turnlog.ToolResultMessage{ToolCallID: "c", Content: json.RawMessage(tt.raw)}.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %v", tt.raw, err)
		}
		if want := `{"role":"toolResult","toolCallId":"c","toolName":"","content":` + tt.want + `,"isError":false}`; string(got) != want {
			t.Errorf("content %s encodes as\n  %s\nwant\n  %s", tt.raw, got, want)
		}
	}
}
