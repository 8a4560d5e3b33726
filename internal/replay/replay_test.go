package replay_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// seqLog numbers events: each line is an event object without its seq.
func seqLog(events ...string) string {
	var b strings.Builder
	for seq, e := range events {
		fmt.Fprintf(&b, `{"seq":%d,%s`+"\n", seq, strings.TrimPrefix(e, "{"))
	}
	return b.String()
}

const (
	sessionStart = `{"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude"}}`
	sameModel    = `"api":"anthropic-messages","provider":"anthropic","model":"claude"`
)

func turnStart(turn int) string { return fmt.Sprintf(`{"type":"turn/start","turn":%d}`, turn) }
func turnEnd(turn int, reason string) string {
	return fmt.Sprintf(`{"type":"turn/end","turn":%d,"reason":%q}`, turn, reason)
}
func user(turn int, text string) string {
	return fmt.Sprintf(`{"type":"user/message","turn":%d,"content":[{"type":"text","text":%q}]}`, turn, text)
}
func chunk(turn, response, block int, delta string) string {
	return fmt.Sprintf(`{"type":"chunk","turn":%d,"response":%d,"block":%d,"delta":%s}`, turn, response, block, delta)
}
func finish(turn, response int, stop, state string) string {
	if state != "" {
		state = `,"replayState":` + state
	}
	return fmt.Sprintf(`{"type":"response/finish","turn":%d,"response":%d,"stopReason":%q%s}`, turn, response, stop, state)
}
func hostMessage(turn, response int, message string) string {
	return fmt.Sprintf(`{"type":"assistant/message","turn":%d,"response":%d,"message":%s}`, turn, response, message)
}
func toolResult(turn int, id string) string {
	return fmt.Sprintf(`{"type":"tool/result","turn":%d,"toolCallId":%q,"toolName":"grep","content":[{"type":"text","text":"found"}],"isError":false}`, turn, id)
}

// run replays a log and returns the transcript and the diagnostics.
func run(t *testing.T, log string, opts replay.Options) (replay.Result, []replay.Diagnostic) {
	t.Helper()
	var diags []replay.Diagnostic
	opts.OnDiagnostic = func(d replay.Diagnostic) { diags = append(diags, d) }
	if opts.Through == 0 {
		opts.Through = replay.Head
	}
	res, err := replay.Transcript(turnlog.NewReader(strings.NewReader(log)).All(), opts)
	if err != nil {
		t.Fatalf("Transcript: %v", err)
	}
	return res, diags
}

// summary renders a transcript as "seq:role/mode" entries.
func summary(res replay.Result) string {
	var parts []string
	for _, m := range res.Messages {
		s := fmt.Sprintf("%d:%s", m.Seq, m.Role)
		if m.Replay != "" {
			s += "/" + string(m.Replay)
		}
		if m.Synthetic {
			s += "/synthetic"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func content(t *testing.T, m replay.Message) string {
	t.Helper()
	var v struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(m.Message, &v); err != nil {
		t.Fatal(err)
	}
	return string(v.Content)
}

// The regression of a max-tokens response that streamed thinking, text and a
// tool call: the follow-up transcript replays it native with the pruned
// envelope, the kept blocks' signatures intact and no tool call.
func TestTruncatedToolCallReplaysNative(t *testing.T) {
	log := seqLog(
		sessionStart,
		turnStart(1),
		user(1, "find the TODOs"),
		chunk(1, 0, 0, `{"type":"thinking","thinking":"Search first."}`),
		chunk(1, 0, 1, `{"type":"text","text":"Let me search."}`),
		chunk(1, 0, 2, `{"type":"toolCall","id":"toolu_1","name":"grep","argumentsDelta":"{\"pattern\":\"TO"}`),
		finish(1, 0, "length", `{"kind":"pi-ai","version":2,"response":{"id":"msg_1"},"blocks":[{"type":"thinking","signature":"sigT"},{"type":"text","signature":"sigX"},{"type":"toolCall","signature":"sigC"}]}`),
		turnEnd(1, "length"),
		turnStart(2),
		user(2, "go on"),
		chunk(2, 0, 0, `{"type":"text","text":"Done."}`),
		finish(2, 0, "stop", `{"kind":"pi-ai","version":2,"blocks":[{"type":"text","signature":"sigY"}]}`),
		turnEnd(2, "stop"),
	)
	res, diags := run(t, log, replay.Options{})
	if got, want := summary(res), "2:user 6:assistant/native 9:user 11:assistant/native"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	if len(diags) != 0 {
		t.Errorf("diagnostics %+v, want none", diags)
	}
	want := `{"role":"assistant","content":[{"type":"thinking","thinking":"Search first.","thinkingSignature":"sigT"},{"type":"text","text":"Let me search.","textSignature":"sigX"}],` +
		sameModel + `,"stopReason":"length","replayState":{"kind":"pi-ai","version":2,"response":{"id":"msg_1"},"blocks":[{"type":"thinking","signature":"sigT"},{"type":"text","signature":"sigX"}]}}`
	if got := string(res.Messages[1].Message); got != want {
		t.Errorf("truncated message =\n  %s\nwant\n  %s", got, want)
	}
	if res.Counts != (replay.Counts{Native: 2}) || res.ThroughSeq != 12 {
		t.Errorf("counts %+v through %d, want 2 native through 12", res.Counts, res.ThroughSeq)
	}
}

// Every unusable state degrades its own message, reports the cause, and the
// next message still replays native.
func TestUnusableStateDegradesOneMessage(t *testing.T) {
	content := `[{"type":"thinking","thinking":"Plan.","thinkingSignature":"old"},{"type":"text","text":"Answer."}]`
	tests := []struct {
		name  string
		state string
		cause replay.Cause
	}{
		{"legacy flat form", `{"thinkingSignatures":["s1","s2","s3"]}`, replay.CauseVersion},
		{"explicit version 1", `{"kind":"pi-ai","version":1,"blocks":[null,null]}`, replay.CauseVersion},
		{"newer version", `{"kind":"pi-ai","version":3,"blocks":[null,null]}`, replay.CauseVersion},
		{"another kind", `{"kind":"vercel-ai","version":2}`, replay.CauseKind},
		{"not an object", `"opaque-blob"`, replay.CauseMalformed},
		{"kind of the wrong type", `{"kind":7,"version":2}`, replay.CauseMalformed},
		{"version of the wrong type", `{"kind":"pi-ai","version":"2"}`, replay.CauseMalformed},
		{"no kind", `{"version":2}`, replay.CauseMalformed},
		{"response not an object", `{"kind":"pi-ai","version":2,"response":[]}`, replay.CauseMalformed},
		{"blocks not an array", `{"kind":"pi-ai","version":2,"blocks":{}}`, replay.CauseMalformed},
		{"entry without a type", `{"kind":"pi-ai","version":2,"blocks":[{"signature":"s"},null]}`, replay.CauseMalformed},
		{"signature not a string", `{"kind":"pi-ai","version":2,"blocks":[{"type":"thinking","signature":1},null]}`, replay.CauseMalformed},
		{"entry count differs", `{"kind":"pi-ai","version":2,"blocks":[{"type":"thinking","signature":"s"},{"type":"text"},{"type":"toolCall"}]}`, replay.CauseShape},
		{"entry type differs", `{"kind":"pi-ai","version":2,"blocks":[{"type":"text","signature":"s"},null]}`, replay.CauseShape},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := seqLog(
				sessionStart,
				turnStart(1),
				user(1, "q1"),
				hostMessage(1, 0, fmt.Sprintf(`{"role":"assistant","content":%s,%s,"stopReason":"stop","replayState":%s}`, content, sameModel, tt.state)),
				turnEnd(1, "stop"),
				turnStart(2),
				user(2, "q2"),
				chunk(2, 0, 0, `{"type":"text","text":"Second."}`),
				finish(2, 0, "stop", `{"kind":"pi-ai","version":2,"blocks":[{"type":"text","signature":"sig2"}]}`),
				turnEnd(2, "stop"),
			)
			res, diags := run(t, log, replay.Options{})
			if got, want := summary(res), "2:user 3:assistant/foreign 6:user 8:assistant/native"; got != want {
				t.Fatalf("transcript %s, want %s", got, want)
			}
			if len(diags) != 1 || diags[0].Code != "INVALID_REPLAY_STATE" || diags[0].Seq != 3 || diags[0].Cause != tt.cause || diags[0].Message == "" {
				t.Fatalf("diagnostics %+v, want one INVALID_REPLAY_STATE at seq 3 with cause %s", diags, tt.cause)
			}
			if got := string(res.Messages[1].Message); got != `{"role":"assistant","content":[{"type":"text","text":"Answer."}],`+sameModel+`,"stopReason":"stop"}` {
				t.Errorf("degraded message %s, want provider-neutral content (pi-ai 1.x: no thinking) and no replay state", got)
			}
			if res.Counts != (replay.Counts{Native: 1, Foreign: 1, Degraded: 1}) {
				t.Errorf("counts %+v", res.Counts)
			}
		})
	}
}

func TestNativeAndForeignConversion(t *testing.T) {
	message := `{"role":"assistant","content":[` +
		`{"type":"thinking","thinking":"Reason.","x-extra":1},` +
		`{"type":"thinking","thinking":"opaque","redacted":true},` +
		`{"type":"thinking","thinking":"  "},` +
		`{"type":"text","text":"Hi.","textSignature":"stale"},` +
		`{"type":"toolCall","id":"c1","name":"grep","arguments":{"q":1},"thoughtSignature":"stale"}` +
		`],` + sameModel + `,"stopReason":"toolUse","replayState":{"kind":"pi-ai","version":2,"blocks":[{"type":"thinking","signature":"s0"},{"type":"thinking","signature":"s1"},null,null,{"type":"toolCall","signature":"s4"}]}}`
	log := seqLog(sessionStart, turnStart(1), user(1, "q"), hostMessage(1, 0, message), toolResult(1, "c1"), turnEnd(1, "toolUse"))
	tests := []struct {
		name    string
		target  turnlog.Adapter
		mode    replay.Mode
		content string
	}{
		{"same model is native", turnlog.Adapter{}, replay.Native,
			`[{"type":"thinking","thinking":"Reason.","thinkingSignature":"s0","x-extra":1},` +
				`{"type":"thinking","thinking":"opaque","thinkingSignature":"s1","redacted":true},` +
				`{"type":"text","text":"Hi.","textSignature":"stale"},` +
				`{"type":"toolCall","id":"c1","name":"grep","arguments":{"q":1},"thoughtSignature":"s4"}]`},
		{"another model is foreign: pi-ai 1.x drops its thinking", turnlog.Adapter{Model: "claude-haiku"}, replay.Foreign,
			`[{"type":"text","text":"Hi."},{"type":"toolCall","id":"c1","name":"grep","arguments":{"q":1}}]`},
		{"another provider is foreign: pi-ai 1.x drops its thinking", turnlog.Adapter{Provider: "bedrock", ReleaseLine: "1"}, replay.Foreign,
			`[{"type":"text","text":"Hi."},{"type":"toolCall","id":"c1","name":"grep","arguments":{"q":1}}]`},
		{"another model is foreign: pi-ai 0.73 turns its thinking into text", turnlog.Adapter{Model: "claude-haiku", ReleaseLine: "0.73"}, replay.Foreign,
			`[{"type":"text","text":"Reason."},{"type":"text","text":"Hi."},{"type":"toolCall","id":"c1","name":"grep","arguments":{"q":1}}]`},
		{"the same model on 0.73 is native as on 1.x", turnlog.Adapter{ReleaseLine: "0.73"}, replay.Native,
			`[{"type":"thinking","thinking":"Reason.","thinkingSignature":"s0","x-extra":1},` +
				`{"type":"thinking","thinking":"opaque","thinkingSignature":"s1","redacted":true},` +
				`{"type":"text","text":"Hi.","textSignature":"stale"},` +
				`{"type":"toolCall","id":"c1","name":"grep","arguments":{"q":1},"thoughtSignature":"s4"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, diags := run(t, log, replay.Options{Target: tt.target})
			if len(diags) != 0 || len(res.Messages) != 3 {
				t.Fatalf("transcript %s diagnostics %+v", summary(res), diags)
			}
			m := res.Messages[1]
			if m.Replay != tt.mode {
				t.Errorf("mode %s, want %s", m.Replay, tt.mode)
			}
			if got := content(t, m); got != tt.content {
				t.Errorf("content =\n  %s\nwant\n  %s", got, tt.content)
			}
			if hasState := strings.Contains(string(m.Message), `"replayState"`); hasState != (tt.mode == replay.Native) {
				t.Errorf("replayState kept: %v, want only on native messages", hasState)
			}
		})
	}
}

func TestMessageWithoutStateIsForeignWithoutDiagnostic(t *testing.T) {
	log := seqLog(sessionStart, turnStart(1), user(1, "q"),
		chunk(1, 0, 0, `{"type":"thinking","thinking":"t"}`), finish(1, 0, "stop", ""), turnEnd(1, "stop"))
	res, diags := run(t, log, replay.Options{})
	if summary(res) != "2:user 4:assistant/foreign" || len(diags) != 0 || res.Counts != (replay.Counts{Foreign: 1}) {
		t.Errorf("transcript %s diagnostics %+v counts %+v", summary(res), diags, res.Counts)
	}
}

func TestTranscriptSelection(t *testing.T) {
	log := seqLog(
		sessionStart,
		turnStart(1),  // 1
		user(1, "q1"), // 2
		chunk(1, 0, 0, `{"type":"text","text":"assembled"}`),                                 // 3
		finish(1, 0, "stop", ""),                                                             // 4
		hostMessage(1, 0, `{"content":[{"type":"text","text":"host"}],"stopReason":"stop"}`), // 5
		turnEnd(1, "stop"), // 6
		turnStart(2),       // 7
		user(2, "q2"),      // 8
		chunk(2, 0, 0, `{"type":"text","text":"partial"}`), // 9
		finish(2, 0, "aborted", ""),                        // 10
		turnEnd(2, "aborted"),                              // 11
		turnStart(3),                                       // 12
		user(3, "q3"),                                      // 13
		hostMessage(3, 0, `{"content":[{"type":"text","text":"failed"}],"stopReason":"error"}`), // 14
		chunk(3, 1, 0, `{"type":"text","text":"cut off"}`),                                      // 15
		turnEnd(3, "aborted"), // 16
	)
	res, _ := run(t, log, replay.Options{})
	if got, want := summary(res), "2:user 5:assistant/foreign 8:user 13:user"; got != want {
		t.Errorf("transcript %s, want %s (host message wins, aborted, errored and partial responses left out)", got, want)
	}
	if got := content(t, res.Messages[1]); got != `[{"type":"text","text":"host"}]` {
		t.Errorf("turn 1 assistant content %s, want the host-written message", got)
	}
	// Through seq 4 the host message is not written yet: the assembled one counts.
	res, _ = run(t, log, replay.Options{Through: 4})
	if got := summary(res); got != "2:user 4:assistant/foreign" || res.ThroughSeq != 4 {
		t.Errorf("through 4: transcript %s through %d", got, res.ThroughSeq)
	}
	if got := content(t, res.Messages[1]); got != `[{"type":"text","text":"assembled"}]` {
		t.Errorf("through 4: content %s, want the assembled message", got)
	}
	res, _ = run(t, log, replay.Options{Through: 1000})
	if res.ThroughSeq != 16 {
		t.Errorf("through beyond the head: throughSeq %d, want the head 16", res.ThroughSeq)
	}
}

func TestMissingToolResults(t *testing.T) {
	twoCalls := hostMessage(1, 0, `{"content":[{"type":"toolCall","id":"a","name":"grep","arguments":{}},{"type":"toolCall","id":"b","name":"read","arguments":{}}],"stopReason":"toolUse","timestamp":7}`)
	log := seqLog(
		sessionStart,
		turnStart(1),          // 1
		user(1, "q"),          // 2
		twoCalls,              // 3
		toolResult(1, "b"),    // 4
		toolResult(1, "b"),    // 5: duplicate
		toolResult(1, "zzz"),  // 6: answers nothing
		turnEnd(1, "toolUse"), // 7
		turnStart(2),          // 8
		user(2, "next"),       // 9
		hostMessage(2, 0, `{"content":[{"type":"toolCall","id":"c","name":"grep","arguments":{}}],"stopReason":"toolUse"}`), // 10
		turnEnd(2, "toolUse"), // 11
	)
	res, _ := run(t, log, replay.Options{})
	want := "2:user 3:assistant/foreign 4:toolResult 3:toolResult/synthetic 9:user 10:assistant/foreign 10:toolResult/synthetic"
	if got := summary(res); got != want {
		t.Fatalf("transcript %s\nwant       %s", got, want)
	}
	if res.Counts.OrphanToolResults != 2 {
		t.Errorf("%d orphan tool results, want the duplicate and the one answering nothing", res.Counts.OrphanToolResults)
	}
	if got := string(res.Messages[3].Message); got != `{"role":"toolResult","toolCallId":"a","toolName":"grep","content":[{"type":"text","text":"No result provided"}],"isError":true,"timestamp":7}` {
		t.Errorf("synthetic result %s", got)
	}
}

func TestTargetDefaultsToSessionAdapter(t *testing.T) {
	log := seqLog(sessionStart, turnStart(1), user(1, "q"),
		chunk(1, 0, 0, `{"type":"text","text":"a"}`),
		finish(1, 0, "stop", `{"kind":"pi-ai","version":2}`), turnEnd(1, "stop"))
	for _, tt := range []struct {
		target turnlog.Adapter
		mode   replay.Mode
		diag   bool
	}{
		{turnlog.Adapter{}, replay.Native, false},
		{turnlog.Adapter{API: "anthropic-messages"}, replay.Native, false},
		{turnlog.Adapter{API: "openai-responses"}, replay.Foreign, false},
		{turnlog.Adapter{Kind: "other-sdk"}, replay.Foreign, true},
	} {
		res, diags := run(t, log, replay.Options{Target: tt.target})
		if res.Messages[1].Replay != tt.mode || (len(diags) == 1) != tt.diag {
			t.Errorf("target %+v: mode %s diagnostics %+v, want %s (diagnostic %v)", tt.target, res.Messages[1].Replay, diags, tt.mode, tt.diag)
		}
	}
}

func TestReplayIsDeterministic(t *testing.T) {
	log := seqLog(sessionStart, turnStart(1), user(1, "q"),
		chunk(1, 0, 0, `{"type":"text","text":"a"}`),
		finish(1, 0, "stop", `{"kind":"pi-ai","version":2,"blocks":[{"type":"text","signature":"s"}]}`), turnEnd(1, "stop"))
	first, _ := run(t, log, replay.Options{})
	second, _ := run(t, log, replay.Options{})
	if !reflect.DeepEqual(first, second) {
		t.Error("same log, different transcripts")
	}
}

// pi-ai and pi-coding-agent store a message with its signatures inline and
// no replayState; that is native state for the same provider, api and model.
func TestInlineSignaturesAreNativeState(t *testing.T) {
	inline := `[{"type":"thinking","thinking":"Plan.","thinkingSignature":"inl0"},` +
		`{"type":"thinking","thinking":"","thinkingSignature":"opaque","redacted":true},` +
		`{"type":"text","text":"Hi.","textSignature":"inl2"},` +
		`{"type":"toolCall","id":"c1","name":"grep","arguments":{},"thoughtSignature":"inl3"}]`
	foreignContent := `[{"type":"text","text":"Hi."},{"type":"toolCall","id":"c1","name":"grep","arguments":{}}]`
	foreign073 := `[{"type":"text","text":"Plan."},{"type":"text","text":"Hi."},{"type":"toolCall","id":"c1","name":"grep","arguments":{}}]`
	envelope := `{"kind":"pi-ai","version":2,"blocks":[{"type":"thinking","signature":"env0"},null,null,{"type":"toolCall","signature":"env3"}]}`
	tests := []struct {
		name    string
		state   string // replayState, if any
		target  turnlog.Adapter
		mode    replay.Mode
		diag    bool
		content string
	}{
		{"same model", "", turnlog.Adapter{}, replay.Native, false, inline},
		{"another model", "", turnlog.Adapter{Model: "claude-haiku"}, replay.Foreign, false, foreignContent},
		{"another provider", "", turnlog.Adapter{Provider: "bedrock"}, replay.Foreign, false, foreignContent},
		{"another api", "", turnlog.Adapter{API: "anthropic-vertex"}, replay.Foreign, false, foreignContent},
		{"a usable envelope wins", envelope, turnlog.Adapter{}, replay.Native, false,
			strings.NewReplacer("inl0", "env0", "inl3", "env3").Replace(inline)},
		{"an unusable envelope degrades", `{"kind":"pi-ai","version":3}`, turnlog.Adapter{}, replay.Foreign, true, foreignContent},
		{"another model on 0.73", "", turnlog.Adapter{Model: "claude-haiku", ReleaseLine: "0.73"}, replay.Foreign, false, foreign073},
		{"an unusable envelope degrades on 0.73", `{"kind":"pi-ai","version":3}`, turnlog.Adapter{ReleaseLine: "0.73"}, replay.Foreign, true, foreign073},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := ""
			if tt.state != "" {
				state = `,"replayState":` + tt.state
			}
			log := seqLog(sessionStart, turnStart(1), user(1, "q"),
				hostMessage(1, 0, `{"role":"assistant","content":`+inline+`,`+sameModel+`,"stopReason":"toolUse"`+state+`}`),
				toolResult(1, "c1"), turnEnd(1, "toolUse"))
			res, diags := run(t, log, replay.Options{Target: tt.target})
			if got := summary(res); got != "2:user 3:assistant/"+string(tt.mode)+" 4:toolResult" {
				t.Fatalf("transcript %s, want the message %s", got, tt.mode)
			}
			if (len(diags) == 1) != tt.diag || len(diags) > 1 {
				t.Errorf("diagnostics %+v, want one: %v", diags, tt.diag)
			}
			if got := content(t, res.Messages[1]); got != tt.content {
				t.Errorf("content =\n  %s\nwant\n  %s", got, tt.content)
			}
		})
	}
}

// pi-ai drops thinking that is empty after JavaScript's trim(), whose
// whitespace is not Go's: U+FEFF is space there, U+0085 is not. (Another
// model's thinking is trimmed only on 0.73: 1.x drops it whole.)
func TestBlankThinkingIsJavaScriptWhitespace(t *testing.T) {
	for _, tt := range []struct {
		thinking string
		kept     bool
	}{
		{"", false},
		{" \t\n\r\v\f", false},
		{"\ufeff", false},
		{"\u00a0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000", false},
		{"\u0085", true},
		{"\u180e", true},
		{"\u200b", true},
		{" x ", true},
	} {
		for _, target := range []turnlog.Adapter{{}, {ReleaseLine: "0.73"}, {Model: "other", ReleaseLine: "0.73"}} {
			log := seqLog(sessionStart, turnStart(1), user(1, "q"),
				hostMessage(1, 0, fmt.Sprintf(`{"content":[{"type":"thinking","thinking":%s},{"type":"text","text":"a","textSignature":"s"}],%s,"stopReason":"stop"}`, jsonString(tt.thinking), sameModel)),
				turnEnd(1, "stop"))
			res, _ := run(t, log, replay.Options{Target: target})
			got := content(t, res.Messages[1])
			if kept := strings.Count(got, `"type"`) == 2; kept != tt.kept {
				t.Errorf("thinking %+q for %+v: content %s, want it kept: %v", tt.thinking, target, got, tt.kept)
			}
		}
	}
}

// pi-ai tracks answered calls by id: one result answers every call that
// shares its id; calls sharing an id that nobody answered each get a result.
func TestToolCallsSharingAnID(t *testing.T) {
	twoA := hostMessage(1, 0, `{"content":[{"type":"toolCall","id":"a","name":"grep","arguments":{}},{"type":"toolCall","id":"a","name":"grep","arguments":{}}],"stopReason":"toolUse"}`)
	for _, tt := range []struct {
		name    string
		results []string
		want    string
		orphans int
	}{
		{"one result", []string{toolResult(1, "a")}, "2:user 3:assistant/foreign 4:toolResult", 0},
		{"two results", []string{toolResult(1, "a"), toolResult(1, "a")}, "2:user 3:assistant/foreign 4:toolResult", 1},
		{"no result", nil, "2:user 3:assistant/foreign 3:toolResult/synthetic 3:toolResult/synthetic", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			events := append([]string{sessionStart, turnStart(1), user(1, "q"), twoA}, tt.results...)
			res, _ := run(t, seqLog(append(events, turnEnd(1, "toolUse"))...), replay.Options{})
			if got := summary(res); got != tt.want || res.Counts.OrphanToolResults != tt.orphans {
				t.Errorf("transcript %s with %d orphans, want %s with %d", got, res.Counts.OrphanToolResults, tt.want, tt.orphans)
			}
		})
	}
}

// A tool result that answers no open call stays out (a provider rejects it)
// and is counted, so nothing disappears silently.
func TestOrphanToolResultsAreCounted(t *testing.T) {
	call := func(stop string) string {
		return hostMessage(1, 0, fmt.Sprintf(`{"content":[{"type":"toolCall","id":"a","name":"grep","arguments":{}}],"stopReason":%q}`, stop))
	}
	for _, tt := range []struct {
		name   string
		events []string
		want   string
	}{
		{"after an aborted message", []string{call("aborted"), toolResult(1, "a")}, "2:user"},
		{"after an errored message", []string{call("error"), toolResult(1, "a")}, "2:user"},
		{"after a streamed response that aborted", []string{call("toolUse"), chunk(1, 1, 0, `{"type":"text","text":"I wi"}`), finish(1, 1, "aborted", ""), toolResult(1, "a")},
			"2:user 3:assistant/foreign 3:toolResult/synthetic"},
		{"after a stream cut off", []string{call("toolUse"), chunk(1, 1, 0, `{"type":"text","text":"I wi"}`), toolResult(1, "a")},
			"2:user 3:assistant/foreign 3:toolResult/synthetic"},
		{"a duplicate", []string{call("toolUse"), toolResult(1, "a"), toolResult(1, "a")}, "2:user 3:assistant/foreign 4:toolResult"},
		{"after the next user message", []string{call("toolUse"), user(1, "stop"), toolResult(1, "a")}, "2:user 3:assistant/foreign 3:toolResult/synthetic 4:user"},
		{"for no call", []string{toolResult(1, "a")}, "2:user"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			events := append([]string{sessionStart, turnStart(1), user(1, "q")}, tt.events...)
			res, _ := run(t, seqLog(append(events, turnEnd(1, "toolUse"))...), replay.Options{})
			if got := summary(res); got != tt.want || res.Counts.OrphanToolResults != 1 {
				t.Errorf("transcript %s with %d orphans, want %s with 1", got, res.Counts.OrphanToolResults, tt.want)
			}
		})
	}
}

// A replay resumed from a checkpoint at a turn boundary continues where the
// first stopped: the call left open there is answered by the next turn, as
// in a replay of the whole log.
func TestCheckpointKeepsToolCallsOpen(t *testing.T) {
	log := seqLog(sessionStart, turnStart(1), user(1, "q"),
		hostMessage(1, 0, `{"content":[{"type":"toolCall","id":"a","name":"grep","arguments":{}}],"stopReason":"toolUse","timestamp":5}`),
		turnEnd(1, "toolUse"), // 4
		turnStart(2), toolResult(2, "a"), hostMessage(2, 0, `{"content":[{"type":"text","text":"done"}],"stopReason":"stop"}`),
		turnEnd(2, "stop"))
	events := readAll(t, log)

	first := replay.NewBuilder(replay.Options{Through: replay.Head})
	for i := range events[:5] {
		first.Add(&events[i])
	}
	res1, open := first.Checkpoint()
	if got := summary(res1); got != "2:user 3:assistant/foreign" {
		t.Fatalf("first part %s, want no synthetic result yet", got)
	}
	if tail := open.Tail(); len(tail) != 1 || !tail[0].Synthetic || tail[0].Seq != 3 {
		t.Fatalf("open calls settle as %+v, want one synthetic result for the call at seq 3", tail)
	}
	through4, _ := run(t, log, replay.Options{Through: 4})
	if got, want := summary(replay.Result{Messages: append(res1.Messages, open.Tail()...)}), summary(through4); got != want {
		t.Errorf("first part with its open calls settled: %s, want %s", got, want)
	}

	second := replay.NewBuilder(replay.Options{Through: replay.Head, Open: open})
	for i := range events[5:] {
		second.Add(&events[5+i])
	}
	res2 := second.Result()
	whole, _ := run(t, log, replay.Options{})
	if got, want := summary(replay.Result{Messages: append(res1.Messages, res2.Messages...)}), summary(whole); got != want || want != "2:user 3:assistant/foreign 6:toolResult 7:assistant/foreign" {
		t.Errorf("resumed transcript %s, whole %s", got, want)
	}
}

func readAll(t *testing.T, log string) []turnlog.Event {
	t.Helper()
	var events []turnlog.Event
	for e, err := range turnlog.NewReader(strings.NewReader(log)).All() {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	return events
}

func jsonString(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}
