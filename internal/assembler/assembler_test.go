package assembler_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// turnLog builds a valid one-turn log from event bodies: seq, type and turn
// are filled in. Each body is `type` or `type,{fields}`.
func turnLog(t *testing.T, bodies ...string) []turnlog.Event {
	t.Helper()
	all := append([]string{`session/start,"adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude"}`, "turn/start"}, bodies...)
	all = append(all, `turn/end,"reason":"stop"`)
	var b strings.Builder
	for seq, body := range all {
		typ, fields, _ := strings.Cut(body, ",")
		turn := ""
		if typ != "session/start" {
			turn = `,"turn":1`
		}
		if fields != "" {
			fields = "," + fields
		}
		fmt.Fprintf(&b, `{"seq":%d,"type":%q%s,"time":"2026-12-02T10:00:%02dZ"%s}`+"\n", seq, typ, turn, seq, fields)
	}
	return decodeLog(t, b.String())
}

func decodeLog(t *testing.T, log string) []turnlog.Event {
	t.Helper()
	var events []turnlog.Event
	for e, err := range turnlog.NewReader(strings.NewReader(log)).All() {
		if err != nil {
			t.Fatalf("test log: %v", err)
		}
		events = append(events, e)
	}
	return events
}

func chunk(block int, delta string) string {
	return fmt.Sprintf(`chunk,"response":0,"block":%d,"delta":%s`, block, delta)
}

func finish(stop, state string) string {
	if state == "" {
		return fmt.Sprintf(`response/finish,"response":0,"stopReason":%q`, stop)
	}
	return fmt.Sprintf(`response/finish,"response":0,"stopReason":%q,"replayState":%s`, stop, state)
}

// stream is a response that emits thinking (block 0), text (block 1) and a
// tool call (block 2) in several deltas.
var stream = []string{
	`response/start,"response":0`,
	chunk(0, `{"type":"thinking","thinking":"Let me "}`),
	chunk(0, `{"type":"thinking","thinking":"look."}`),
	chunk(1, `{"type":"text","text":"Searching"}`),
	chunk(1, `{"type":"text","text":" now."}`),
	chunk(2, `{"type":"toolCall","id":"toolu_1","name":"grep","argumentsDelta":"{\"pattern\":"}`),
	chunk(2, `{"type":"toolCall","argumentsDelta":"\"TODO\"}"}`),
}

const envelopeV2 = `{"kind":"pi-ai","version":2,"response":{"id":"msg_1","model":"claude"},"blocks":[{"type":"thinking","signature":"sigT"},{"type":"text","signature":"sigX"},{"type":"toolCall","signature":"sigC"}],"x-future":[1]}`

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAssembleMessages(t *testing.T) {
	const (
		thinking = `{"type":"thinking","thinking":"Let me look."}`
		text     = `{"type":"text","text":"Searching now."}`
		call     = `{"type":"toolCall","id":"toolu_1","name":"grep","arguments":{"pattern":"TODO"}}`
	)
	tests := []struct {
		name        string
		finish      string
		wantContent string
		wantState   string // "" for none
		wantDiag    string // code, "" for none
	}{
		{
			name:        "max tokens drops the tool call and its entry, keeps the signatures of the rest",
			finish:      finish("length", envelopeV2),
			wantContent: "[" + thinking + "," + text + "]",
			wantState:   `{"kind":"pi-ai","version":2,"response":{"id":"msg_1","model":"claude"},"blocks":[{"type":"thinking","signature":"sigT"},{"type":"text","signature":"sigX"}],"x-future":[1]}`,
		},
		{
			name:        "an untransformed response keeps its envelope byte for byte",
			finish:      finish("toolUse", envelopeV2),
			wantContent: "[" + thinking + "," + text + "," + call + "]",
			wantState:   envelopeV2,
		},
		{
			name:        "an envelope without entries passes through a drop untouched",
			finish:      finish("length", `{"kind":"pi-ai","version":2,"response":{"id":"msg_1"}}`),
			wantContent: "[" + thinking + "," + text + "]",
			wantState:   `{"kind":"pi-ai","version":2,"response":{"id":"msg_1"}}`,
		},
		{
			name:        "legacy flat state has no entries and passes through",
			finish:      finish("toolUse", `{"thinkingSignatures":["a","b"]}`),
			wantContent: "[" + thinking + "," + text + "," + call + "]",
			wantState:   `{"thinkingSignatures":["a","b"]}`,
		},
		{
			name:        "more entries than blocks: envelope discarded",
			finish:      finish("toolUse", `{"kind":"pi-ai","version":2,"blocks":[null,null,null,null]}`),
			wantContent: "[" + thinking + "," + text + "," + call + "]",
			wantDiag:    assembler.CodeEnvelopeMisaligned,
		},
		{
			name:        "fewer entries than blocks on a pruned response: discarded, not pruned",
			finish:      finish("length", `{"kind":"pi-ai","version":2,"blocks":[{"type":"thinking","signature":"s"},{"type":"text"}]}`),
			wantContent: "[" + thinking + "," + text + "]",
			wantDiag:    assembler.CodeEnvelopeMisaligned,
		},
		{
			name:        "an entry naming another block type: discarded",
			finish:      finish("stop", `{"kind":"pi-ai","version":2,"blocks":[{"type":"text"},{"type":"thinking"},null]}`),
			wantContent: "[" + thinking + "," + text + "," + call + "]",
			wantDiag:    assembler.CodeEnvelopeMisaligned,
		},
		{
			name:        "unreadable entries: discarded",
			finish:      finish("stop", `{"kind":"pi-ai","version":2,"blocks":["sigT","sigX",null]}`),
			wantContent: "[" + thinking + "," + text + "," + call + "]",
			wantDiag:    assembler.CodeEnvelopeMisaligned,
		},
		{
			name:        "null entries are aligned like any other",
			finish:      finish("length", `{"kind":"pi-ai","version":2,"blocks":[null,{"type":"text","signature":"x"},null]}`),
			wantContent: "[" + thinking + "," + text + "]",
			wantState:   `{"kind":"pi-ai","version":2,"blocks":[null,{"type":"text","signature":"x"}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := assembler.AssembleLog(turnLog(t, append(stream, tt.finish)...))
			if len(res.Messages) != 1 {
				t.Fatalf("got %d messages, want 1", len(res.Messages))
			}
			m := res.Messages[0]
			if m.Seq != 9 || m.Turn != 1 || m.Response != 0 {
				t.Errorf("message at seq %d turn %d response %d, want the finish: seq 9 turn 1 response 0", m.Seq, m.Turn, m.Response)
			}
			if got := mustJSON(t, m.Message.Content); got != tt.wantContent {
				t.Errorf("content =\n  %s\nwant\n  %s", got, tt.wantContent)
			}
			if got := string(m.Message.ReplayState); got != tt.wantState {
				t.Errorf("replayState =\n  %s\nwant\n  %s", got, tt.wantState)
			}
			var codes []string
			for _, d := range res.Diagnostics {
				codes = append(codes, d.Code)
				if d.Seq != 9 || d.Message == "" {
					t.Errorf("diagnostic %+v, want seq 9 and a message", d)
				}
			}
			if want := strings.Fields(tt.wantDiag); strings.Join(codes, " ") != strings.Join(want, " ") {
				t.Errorf("diagnostics %v, want %v", codes, want)
			}
		})
	}
}

func TestAssembledMessageFields(t *testing.T) {
	events := turnLog(t,
		`response/start,"response":0,"adapter":{"api":"openai-responses","provider":"openai","model":"gpt-5"}`,
		chunk(0, `{"type":"text","text":"hi"}`),
		`response/finish,"response":0,"stopReason":"stop","usage":{"input":10,"output":2}`,
		chunk(0, `{"type":"text","text":" late"}`),
		`response/finish,"response":0,"stopReason":"stop"`,
		chunk(0, `{"type":"text","text":"no start"}`),
		`response/finish,"response":1,"stopReason":"stop"`,
	)
	// The last chunk belongs to response 0 (seq 7), so response 1 finished empty.
	res := assembler.AssembleLog(events)
	want := []string{
		`{"role":"assistant","content":[{"type":"text","text":"hi"}],"api":"openai-responses","provider":"openai","model":"gpt-5","usage":{"input":10,"output":2},"stopReason":"stop","timestamp":1796205604000}`,
		`{"role":"assistant","content":[],"api":"anthropic-messages","provider":"anthropic","model":"claude","stopReason":"stop","timestamp":1796205608000}`,
	}
	if len(res.Messages) != len(want) {
		t.Fatalf("got %d messages, want %d", len(res.Messages), len(want))
	}
	for i, m := range res.Messages {
		if got := mustJSON(t, m.Message); got != want[i] {
			t.Errorf("message %d =\n  %s\nwant\n  %s", i, got, want[i])
		}
	}
	var stray []int64
	for _, d := range res.Diagnostics {
		if d.Code == assembler.CodeInconsistentStream {
			stray = append(stray, d.Seq)
		}
	}
	if fmt.Sprint(stray) != "[5 6 7]" {
		t.Errorf("inconsistent-stream diagnostics at %v, want the late chunks and the second finish: [5 6 7]", stray)
	}
}

func TestToolArguments(t *testing.T) {
	tests := []struct {
		deltas   []string
		wantArgs string
		wantDiag bool
	}{
		{[]string{`{"a":`, `[1, 2]}`}, `{"a":[1, 2]}`, false},
		{nil, `{}`, false},
		{[]string{`{"a":`}, `{}`, true},
		{[]string{`[1]`}, `{}`, true},
	}
	for _, tt := range tests {
		bodies := []string{chunk(0, `{"type":"toolCall","id":"c1","name":"run"}`)}
		for _, d := range tt.deltas {
			bodies = append(bodies, chunk(0, fmt.Sprintf(`{"type":"toolCall","argumentsDelta":%q}`, d)))
		}
		res := assembler.AssembleLog(turnLog(t, append(bodies, finish("toolUse", ""))...))
		if len(res.Messages) != 1 || len(res.Messages[0].Message.Content) != 1 {
			t.Fatalf("deltas %q: want one message with the call kept, got %+v", tt.deltas, res.Messages)
		}
		if got := string(res.Messages[0].Message.Content[0].Arguments); got != tt.wantArgs {
			t.Errorf("deltas %q: arguments %s, want %s", tt.deltas, got, tt.wantArgs)
		}
		gotDiag := len(res.Diagnostics) == 1 && res.Diagnostics[0].Code == assembler.CodeInvalidToolArguments
		if gotDiag != tt.wantDiag || (!tt.wantDiag && len(res.Diagnostics) > 0) {
			t.Errorf("deltas %q: diagnostics %+v, want INVALID_TOOL_ARGUMENTS: %v", tt.deltas, res.Diagnostics, tt.wantDiag)
		}
	}
}

func TestFrozenPartialText(t *testing.T) {
	tests := []struct {
		name     string
		finish   []string
		wantStop turnlog.StopReason
	}{
		{"aborted", []string{finish("aborted", envelopeV2)}, turnlog.StopReasonAborted},
		{"error", []string{finish("error", "")}, turnlog.StopReasonError},
		{"no finish before turn/end", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := assembler.AssembleLog(turnLog(t, append(stream[:5:5], tt.finish...)...))
			if len(res.Messages) != 0 {
				t.Errorf("partial response became a message: %s", mustJSON(t, res.Messages))
			}
			if len(res.Partials) != 1 {
				t.Fatalf("got %d partials, want 1", len(res.Partials))
			}
			p := res.Partials[0]
			want := `[{"type":"thinking","thinking":"Let me look."},{"type":"text","text":"Searching now."}]`
			if p.StopReason != tt.wantStop || p.Turn != 1 || mustJSON(t, p.Content) != want {
				t.Errorf("partial = %+v %s, want stop %q and the streamed text", p, mustJSON(t, p.Content), tt.wantStop)
			}
		})
	}
}

func TestBlockOrderAndUnknownTypes(t *testing.T) {
	res := assembler.AssembleLog(turnLog(t,
		chunk(1, `{"type":"text","text":"B"}`),
		chunk(0, `{"type":"text","text":"A"}`),
		chunk(2, `{"type":"image"}`),
		chunk(1, `{"type":"thinking","thinking":"x"}`),
		finish("stop", `{"kind":"pi-ai","version":2,"blocks":[{"type":"text","signature":"a"},{"type":"text","signature":"b"},{"type":"image","signature":"i"}]}`),
	))
	m := res.Messages[0].Message
	if got := mustJSON(t, m.Content); got != `[{"type":"text","text":"A"},{"type":"text","text":"B"}]` {
		t.Errorf("content %s, want blocks in block order and the image block dropped", got)
	}
	if got := string(m.ReplayState); got != `{"kind":"pi-ai","version":2,"blocks":[{"type":"text","signature":"a"},{"type":"text","signature":"b"}]}` {
		t.Errorf("replayState %s, want the dropped block's entry pruned with it", got)
	}
	var codes []string
	for _, d := range res.Diagnostics {
		codes = append(codes, d.Code)
	}
	if strings.Join(codes, " ") != "INCONSISTENT_STREAM UNKNOWN_BLOCK_TYPE" {
		t.Errorf("diagnostics %v", codes)
	}

	skipped := assembler.AssembleLog(turnLog(t,
		chunk(0, `{"type":"text","text":"A"}`),
		chunk(2, `{"type":"text","text":"C"}`),
		finish("stop", `{"kind":"pi-ai","version":2,"blocks":[null,null]}`),
	))
	if s := skipped.Messages[0].Message.ReplayState; s != nil || len(skipped.Diagnostics) != 1 || skipped.Diagnostics[0].Code != assembler.CodeEnvelopeMisaligned {
		t.Errorf("skipped block number: state %s, diagnostics %+v; want the envelope discarded", s, skipped.Diagnostics)
	}
}

func TestAssemblyIsDeterministicAndResumable(t *testing.T) {
	events := decodeLog(t, string(loggen.Log(3000, 3)))
	first, second := assembler.AssembleLog(events), assembler.AssembleLog(events)
	if len(first.Messages) == 0 || mustJSON(t, first) != mustJSON(t, second) {
		t.Fatal("assembling the same events twice gave different bytes")
	}
	// From a checkpoint at a turn/start, later turns assemble identically.
	var from int
	for i, e := range events {
		if e.Type == turnlog.TypeTurnStart && e.Seq > 1500 {
			from = i
			break
		}
	}
	a := assembler.New(loggen.Adapter)
	var resumed []assembler.Assembled
	for i := from; i < len(events); i++ {
		if out := a.Add(&events[i]); out.Message != nil {
			resumed = append(resumed, *out.Message)
		}
	}
	var later []assembler.Assembled
	for _, m := range first.Messages {
		if m.Seq > events[from].Seq {
			later = append(later, m)
		}
	}
	if mustJSON(t, resumed) != mustJSON(t, later) {
		t.Error("assembly resumed at a turn/start differs from the full assembly")
	}
}

// TestOversizeResponse: a response that streams more than MaxMessageBytes
// is a data error for that message only — its content is not kept, its
// message says so without replay state, a diagnostic names it — and the
// next response of the turn assembles as usual.
func TestOversizeResponse(t *testing.T) {
	piece := strings.Repeat("x", 1<<20)
	var bodies []string
	bodies = append(bodies, `response/start,"response":0`)
	for range assembler.MaxMessageBytes>>20 + 2 {
		bodies = append(bodies, chunk(0, fmt.Sprintf(`{"type":"text","text":%q}`, piece)))
	}
	bodies = append(bodies, chunk(1, `{"type":"toolCall","id":"toolu_1","name":"grep","argumentsDelta":"{}"}`))
	bodies = append(bodies, finish("toolUse", envelopeV2),
		`response/start,"response":1`,
		`chunk,"response":1,"block":0,"delta":{"type":"text","text":"Done."}`,
		`response/finish,"response":1,"stopReason":"stop"`)
	res := assembler.AssembleLog(turnLog(t, bodies...))
	if len(res.Messages) != 2 {
		t.Fatalf("got %d messages, want 2", len(res.Messages))
	}
	big := res.Messages[0].Message
	streamed := (assembler.MaxMessageBytes>>20+2)<<20 + 2
	if len(big.Content) != 1 || big.Content[0].Type != turnlog.BlockText ||
		!strings.Contains(big.Content[0].Text, fmt.Sprintf("streamed %d bytes, more than the %d a message may have", streamed, assembler.MaxMessageBytes)) {
		t.Errorf("oversize message content: %.300s", mustJSON(t, big.Content))
	}
	if big.ReplayState != nil || big.StopReason != turnlog.StopReasonToolUse {
		t.Errorf("oversize message: replay state %s, stop %q; want none and toolUse", big.ReplayState, big.StopReason)
	}
	if len(res.Diagnostics) != 1 || res.Diagnostics[0].Code != assembler.CodeMessageTooLarge {
		t.Errorf("diagnostics %s, want one %s", mustJSON(t, res.Diagnostics), assembler.CodeMessageTooLarge)
	}
	if got := mustJSON(t, res.Messages[1].Message.Content); got != `[{"type":"text","text":"Done."}]` {
		t.Errorf("the next response: %s", got)
	}
}
