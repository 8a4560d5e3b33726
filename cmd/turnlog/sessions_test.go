package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// These tests run the offline commands on hand-written sessions that no
// other test reads, and check every member a user would read.

// transcriptEntry is one replayed message as the contract lists it.
type transcriptEntry struct {
	seq       int64
	role      string
	replay    string // assistant messages only
	synthetic bool
	message   string // the pi-ai message, as JSON
}

// assertTranscript compares the replay output's messages entry by entry.
func assertTranscript(t *testing.T, v map[string]any, want []transcriptEntry) {
	t.Helper()
	got := path(t, v, "messages").([]any)
	if len(got) != len(want) {
		t.Errorf("%d messages, want %d: %s", len(got), len(want), summarize(t, v))
	}
	for i := range min(len(got), len(want)) {
		m, w := got[i].(map[string]any), want[i]
		mode, _ := m["replay"].(string)
		synthetic, _ := m["synthetic"].(bool)
		if m["seq"] != float64(w.seq) || m["role"] != w.role || mode != w.replay || synthetic != w.synthetic {
			t.Errorf("message %d: seq %v role %v replay %q synthetic %v, want seq %d role %s replay %q synthetic %v",
				i, m["seq"], m["role"], mode, synthetic, w.seq, w.role, w.replay, w.synthetic)
		}
		assertJSON(t, "message "+compact(t, m["seq"]), m["message"], w.message)
	}
}

// assertJSON compares a decoded value with JSON text, member order aside.
func assertJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad expectation: %v", what, err)
	}
	if g, w := compact(t, got), compact(t, w); g != w {
		t.Errorf("%s:\n   got %s\n  want %s", what, g, w)
	}
}

func runOK(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, code := cli(t, stdin, args...)
	if code != 0 || errOut != "" {
		t.Fatalf("turnlog %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
	}
	return out
}

func readLog(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(logs + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const (
	sonnet       = `"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"`
	gpt5         = `"api":"openai-responses","provider":"openai","model":"gpt-5"`
	gemini       = `"api":"google-generative-ai","provider":"google","model":"gemini-2.5-pro"`
	noResultText = `[{"type":"text","text":"No result provided"}]`
)

// A tool-use session whose first turn was aborted while one of two tool
// calls was still running: the call without a result gets a synthetic
// error result after the real one, before the next user message.
func TestToolCallWithoutResult(t *testing.T) {
	const name = "tool-call-without-result.jsonl"
	state01A := `{"kind":"pi-ai","version":2,"response":{"id":"msg_01A",` + sonnet + `},"blocks":[{"type":"thinking","signature":"ErcBCkgIBhABGAIiQJob1"},null]}`
	state01B := `{"kind":"pi-ai","version":2,"response":{"id":"msg_01B",` + sonnet + `},"blocks":[{"type":"text","signature":"txt_01B"},null,null]}`
	state02A := `{"kind":"pi-ai","version":2,"response":{"id":"msg_02A",` + sonnet + `},"blocks":[{"type":"text","signature":"txt_02A"}]}`
	turn1 := []transcriptEntry{
		{2, "user", "", false, `{"role":"user","content":[{"type":"text","text":"The nightly job failed. Check its config and the last run's log."}],"timestamp":1795874700120}`},
		{7, "assistant", "native", false, `{"role":"assistant","content":[
			{"type":"thinking","thinking":"Start with the job definition.","thinkingSignature":"ErcBCkgIBhABGAIiQJob1"},
			{"type":"toolCall","id":"toolu_01A","name":"read_file","arguments":{"path":"deploy/nightly.yaml"}}],
			` + sonnet + `,"usage":{"input":2210,"output":58},"stopReason":"toolUse","timestamp":1795874702000,"replayState":` + state01A + `}`},
		{8, "toolResult", "", false, `{"role":"toolResult","toolCallId":"toolu_01A","toolName":"read_file","content":[{"type":"text","text":"schedule: \"0 3 * * *\"\nimage: registry.local/etl:1.14\n"}],"isError":false,"timestamp":1795874702300}`},
		{13, "assistant", "native", false, `{"role":"assistant","content":[
			{"type":"text","text":"The schedule looks right. I'll fetch the last run's log and the image's tags.","textSignature":"txt_01B"},
			{"type":"toolCall","id":"toolu_01B","name":"bash","arguments":{"command":"kubectl logs job/nightly --tail=50"}},
			{"type":"toolCall","id":"toolu_01C","name":"bash","arguments":{"command":"crane ls registry.local/etl"}}],
			` + sonnet + `,"usage":{"input":2390,"output":71},"stopReason":"toolUse","timestamp":1795874704200,"replayState":` + state01B + `}`},
		{14, "toolResult", "", false, `{"role":"toolResult","toolCallId":"toolu_01B","toolName":"bash","content":[{"type":"text","text":"Error: ImagePullBackOff: registry.local/etl:1.14 not found"}],"isError":false,"timestamp":1795874705900}`},
		{13, "toolResult", "", true, `{"role":"toolResult","toolCallId":"toolu_01C","toolName":"bash","content":` + noResultText + `,"isError":true,"timestamp":1795874704200}`},
	}
	whole := append(turn1,
		transcriptEntry{17, "user", "", false, `{"role":"user","content":[{"type":"text","text":"Skip the registry. What does the error mean?"}],"timestamp":1795874730000}`},
		transcriptEntry{21, "assistant", "native", false, `{"role":"assistant","content":[
			{"type":"text","text":"The tag 1.14 does not exist in the registry, so the pod cannot start. Pin the last tag that was pushed.","textSignature":"txt_02A"}],
			` + sonnet + `,"usage":{"input":2530,"output":40},"stopReason":"stop","timestamp":1795874731800,"replayState":` + state02A + `}`},
	)

	v := decode(t, "replay", runOK(t, "", "replay", logs+name))
	if path(t, v, "throughSeq") != 22.0 {
		t.Errorf("throughSeq %v, want 22", path(t, v, "throughSeq"))
	}
	assertTranscript(t, v, whole)
	assertJSON(t, "counts", path(t, v, "counts"), `{"native":3,"foreign":0,"degraded":0,"orphanToolResults":0}`)
	assertJSON(t, "diagnostics", path(t, v, "diagnostics"), `[]`)

	// Through the last tool result, from stdin: the open turn ends the
	// transcript, and the unanswered call still gets its result.
	v = decode(t, "replay", runOK(t, readLog(t, name), "replay", "--through", "14", "-"))
	if path(t, v, "throughSeq") != 14.0 {
		t.Errorf("--through 14: throughSeq %v", path(t, v, "throughSeq"))
	}
	assertTranscript(t, v, turn1)

	// A fork inside the aborted turn keeps the whole turn; its transcript is
	// the source's through the same cut.
	point := decode(t, "fork-point", runOK(t, "", "fork-point", "--at", "10", logs+name))
	assertJSON(t, "fork point", point, `{"atSeq":"10","anchorSeq":10,"cutSeq":15,"cutTurn":1,"cutReason":"aborted"}`)
	child := runOK(t, "", "cut", "--at", "10", logs+name)
	if want := strings.Join(strings.SplitAfter(readLog(t, name), "\n")[:16], ""); child != want {
		t.Errorf("child log is not events 0..15 of the source:\n%s", child)
	}
	v = decode(t, "replay", runOK(t, child, "replay", "-"))
	assertTranscript(t, v, turn1)

	// Assembly: one message per finished response, the tool call's
	// arguments joined from their two deltas.
	v = decode(t, "assemble", runOK(t, "", "assemble", logs+name))
	var headers []string
	for _, m := range path(t, v, "messages").([]any) {
		headers = append(headers, compact(t, []any{path(t, m, "seq"), path(t, m, "turn"), path(t, m, "response")}))
	}
	if got := strings.Join(headers, " "); got != "[7,1,0] [13,1,1] [21,2,0]" {
		t.Errorf("assembled [seq,turn,response]: %s", got)
	}
	assertJSON(t, "assembled tool call", path(t, v, "messages", 0, "message", "content", 1),
		`{"type":"toolCall","id":"toolu_01A","name":"read_file","arguments":{"path":"deploy/nightly.yaml"}}`)
	assertJSON(t, "assembled envelope", path(t, v, "messages", 1, "message", "replayState"), state01B)

	if out := runOK(t, "", "validate", logs+name); out != logs+name+": valid, 23 events\n" {
		t.Errorf("validate: %q", out)
	}
}

// A session that moved from Claude to GPT-5 in its second turn. Replayed for
// the session's own model, the GPT-5 message is foreign; replayed for GPT-5,
// the Claude message is, and loses its thinking (pi-ai 1.x; on 0.73 the
// readable thinking becomes text); replayed for another adapter kind, every
// message's state is unusable.
func TestModelSwitch(t *testing.T) {
	const name = "model-switch.jsonl"
	user2 := transcriptEntry{2, "user", "", false, `{"role":"user","content":[{"type":"text","text":"Why is p99 latency up since Tuesday?"}],"timestamp":1795939201000}`}
	user10 := transcriptEntry{10, "user", "", false, `{"role":"user","content":[{"type":"text","text":"Switching you to GPT-5 for the write-up. Draft the incident summary."}],"timestamp":1795939380000}`}
	stateS1 := `{"kind":"pi-ai","version":2,"response":{"id":"msg_s1",` + sonnet + `},"blocks":[{"type":"thinking","signature":"ErUBsonnet1"},{"type":"thinking","signature":"EmwKredacted1"},{"type":"text","signature":null}]}`
	stateG2 := `{"kind":"pi-ai","version":2,"response":{"id":"resp_g2",` + gpt5 + `},"blocks":[{"type":"thinking","signature":"{\"type\":\"reasoning\",\"id\":\"rs_g2\"}"},{"type":"text","signature":"msg_g2"}]}`
	claudeForeign := `{"role":"assistant","content":[
		{"type":"text","text":"The rise starts with Tuesday's deploy, which halved the cache."}],
		` + sonnet + `,"usage":{"input":1200,"output":88},"stopReason":"stop","timestamp":1795939204000}`
	gptForeign := `{"role":"assistant","content":[
		{"type":"text","text":"Incident: p99 latency rose 40% after the cache was halved on Tuesday. Fix: restore the cache size."}],
		` + gpt5 + `,"usage":{"input":1500,"output":61},"stopReason":"stop","timestamp":1795939382500}`
	claudeForeign073 := `{"role":"assistant","content":[
		{"type":"text","text":"Tuesday matches the cache size change."},
		{"type":"text","text":"The rise starts with Tuesday's deploy, which halved the cache."}],
		` + sonnet + `,"usage":{"input":1200,"output":88},"stopReason":"stop","timestamp":1795939204000}`

	v := decode(t, "replay", runOK(t, "", "replay", logs+name))
	assertTranscript(t, v, []transcriptEntry{
		user2,
		{7, "assistant", "native", false, `{"role":"assistant","content":[
			{"type":"thinking","thinking":"Tuesday matches the cache size change.","thinkingSignature":"ErUBsonnet1"},
			{"type":"thinking","thinking":"","thinkingSignature":"EmwKredacted1","redacted":true},
			{"type":"text","text":"The rise starts with Tuesday's deploy, which halved the cache."}],
			` + sonnet + `,"usage":{"input":1200,"output":88},"stopReason":"stop","timestamp":1795939204000,"replayState":` + stateS1 + `}`},
		user10,
		{15, "assistant", "foreign", false, gptForeign},
	})
	assertJSON(t, "counts", path(t, v, "counts"), `{"native":1,"foreign":1,"degraded":0,"orphanToolResults":0}`)
	assertJSON(t, "diagnostics", path(t, v, "diagnostics"), `[]`)

	v = decode(t, "replay", runOK(t, "", "replay", "--api", "openai-responses", "--provider", "openai", "--model", "gpt-5", logs+name))
	assertTranscript(t, v, []transcriptEntry{
		user2,
		{7, "assistant", "foreign", false, claudeForeign},
		user10,
		{15, "assistant", "native", false, `{"role":"assistant","content":[
			{"type":"thinking","thinking":"Summary: cause, impact, fix.","thinkingSignature":"{\"type\":\"reasoning\",\"id\":\"rs_g2\"}"},
			{"type":"text","text":"Incident: p99 latency rose 40% after the cache was halved on Tuesday. Fix: restore the cache size.","textSignature":"msg_g2"}],
			` + gpt5 + `,"usage":{"input":1500,"output":61},"stopReason":"stop","timestamp":1795939382500,"replayState":` + stateG2 + `}`},
	})
	assertJSON(t, "diagnostics", path(t, v, "diagnostics"), `[]`)
	v = decode(t, "replay", runOK(t, "", "replay", "--api", "openai-responses", "--provider", "openai", "--model", "gpt-5", "--release-line", "0.73", logs+name))
	assertJSON(t, "the Claude message for GPT-5 on pi-ai 0.73", path(t, v, "messages", 1, "message"), claudeForeign073)

	// Degraded messages are diagnostics, not a failure: exit 0.
	v = decode(t, "replay", runOK(t, "", "replay", "--kind", "vercel-ai", logs+name))
	assertTranscript(t, v, []transcriptEntry{user2, {7, "assistant", "foreign", false, claudeForeign}, user10, {15, "assistant", "foreign", false, gptForeign}})
	kindDiag := `"code":"INVALID_REPLAY_STATE","cause":"kind","message":"replay state of kind \"pi-ai\" cannot be used by a \"vercel-ai\" adapter; replayed provider-neutral"`
	assertJSON(t, "diagnostics", path(t, v, "diagnostics"), `[{"seq":7,`+kindDiag+`},{"seq":15,`+kindDiag+`}]`)
	assertJSON(t, "counts", path(t, v, "counts"), `{"native":0,"foreign":2,"degraded":2,"orphanToolResults":0}`)
}

// A max-tokens response that streamed text and two tool calls, the second
// cut off mid-arguments: both calls and their envelope entries are dropped,
// the text keeps its signature, and no result is synthesized for the calls.
func TestLengthResponseWithTwoToolCalls(t *testing.T) {
	const name = "length-two-tool-calls.jsonl"
	source := readLog(t, name)
	stateR2 := `{"kind":"pi-ai","version":2,"response":{"id":"gem_r2",` + gemini + `},"blocks":[{"type":"toolCall","signature":"CiQB0e2Kb2call1"}]}`
	stateR3 := `{"kind":"pi-ai","version":2,"response":{"id":"gem_r3",` + gemini + `},"blocks":[{"type":"text","signature":"CiQB0e2Kb3text"}]}`
	prunedR1 := `{"kind":"pi-ai","version":2,"response":{"id":"gem_r1",` + gemini + `},"blocks":[{"type":"text","signature":"CiQB0e2Kb1text"}]}`

	v := decode(t, "assemble", runOK(t, source, "assemble", "-"))
	assertJSON(t, "assembly", v, `{"messages":[
		{"seq":7,"turn":1,"response":0,"message":{"role":"assistant","content":[{"type":"text","text":"I'll move the files, then fix the imports."}],
			`+gemini+`,"usage":{"input":3100,"output":1024},"stopReason":"length","timestamp":1796055603200,"replayState":`+prunedR1+`}},
		{"seq":13,"turn":2,"response":0,"message":{"role":"assistant","content":[{"type":"toolCall","id":"call_mv2","name":"bash","arguments":{"command":"git mv internal/pay internal/billing"}}],
			`+gemini+`,"usage":{"input":3300,"output":30},"stopReason":"toolUse","timestamp":1796055661100,"replayState":`+stateR2+`}},
		{"seq":17,"turn":2,"response":1,"message":{"role":"assistant","content":[{"type":"text","text":"Moved. Next I'll update the imports."}],
			`+gemini+`,"usage":{"input":3350,"output":12},"stopReason":"stop","timestamp":1796055662500,"replayState":`+stateR3+`}}],
		"partials":[],"diagnostics":[]}`)

	out := runOK(t, "", "replay", logs+name)
	v = decode(t, "replay", out)
	assertTranscript(t, v, []transcriptEntry{
		{2, "user", "", false, `{"role":"user","content":[{"type":"text","text":"Rename the package to billing and update its imports."}],"timestamp":1796055600500}`},
		{7, "assistant", "native", false, `{"role":"assistant","content":[{"type":"text","text":"I'll move the files, then fix the imports.","textSignature":"CiQB0e2Kb1text"}],
			` + gemini + `,"usage":{"input":3100,"output":1024},"stopReason":"length","timestamp":1796055603200,"replayState":` + prunedR1 + `}`},
		{10, "user", "", false, `{"role":"user","content":"Continue, one command at a time.","timestamp":1796055660000}`},
		{13, "assistant", "native", false, `{"role":"assistant","content":[{"type":"toolCall","id":"call_mv2","name":"bash","arguments":{"command":"git mv internal/pay internal/billing"},"thoughtSignature":"CiQB0e2Kb2call1"}],
			` + gemini + `,"usage":{"input":3300,"output":30},"stopReason":"toolUse","timestamp":1796055661100,"replayState":` + stateR2 + `}`},
		{14, "toolResult", "", false, `{"role":"toolResult","toolCallId":"call_mv2","toolName":"bash","content":[{"type":"text","text":""}],"isError":false,"timestamp":1796055661600}`},
		{17, "assistant", "native", false, `{"role":"assistant","content":[{"type":"text","text":"Moved. Next I'll update the imports.","textSignature":"CiQB0e2Kb3text"}],
			` + gemini + `,"usage":{"input":3350,"output":12},"stopReason":"stop","timestamp":1796055662500,"replayState":` + stateR3 + `}`},
	})
	if strings.Contains(out, "call_sed") || strings.Contains(out, `"call_mv"`) {
		t.Error("a tool call of the truncated response reached the transcript")
	}

	point := decode(t, "fork-point", runOK(t, "", "fork-point", "--at", "7.5", logs+name))
	assertJSON(t, "fork point", point, `{"atSeq":"7.5","anchorSeq":7,"cutSeq":8,"cutTurn":1,"cutReason":"length"}`)
	if child, want := runOK(t, source, "cut", "--at", "7.5", "-"), strings.Join(strings.SplitAfter(source, "\n")[:9], ""); child != want {
		t.Errorf("child log is not events 0..8 of the source:\n%s", child)
	}
}

// A bad value is reported on one line naming the input, the line, the field
// and the value.
func TestBadFieldValue(t *testing.T) {
	lines := strings.SplitAfter(readLog(t, "model-switch.jsonl"), "\n")
	lines[4] = strings.Replace(lines[4], `"block":0`, `"block":-2`, 1)
	for _, command := range []string{"assemble", "replay", "validate"} {
		out, errOut, code := cli(t, strings.Join(lines, ""), command, "-")
		const want = `stdin: line 5 (seq 4): field "block": -2 is negative`
		if code != 1 || !strings.Contains(out+errOut, want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and %q", command, code, out, errOut, want)
		}
		if command != "validate" && (out != "" || strings.Count(errOut, "\n") != 1) {
			t.Errorf("%s: want one line on stderr and nothing on stdout; got stderr %q stdout %q", command, errOut, out)
		}
	}
}
