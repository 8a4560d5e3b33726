package replay_test

import (
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// contextLog has two turns with tool calls, then a compaction that keeps
// from the second call's result (it cuts turn 2 after its call), inserted
// context, and a third turn.
var contextLog = seqLog(
	sessionStart,
	`{"type":"system/message","content":"be brief"}`,
	turnStart(1), user(1, "q1"),
	hostMessage(1, 0, `{"content":[{"type":"toolCall","id":"c1","name":"ls","arguments":{}}],`+sameModel+`,"stopReason":"toolUse"}`),
	toolResult(1, "c1"),
	hostMessage(1, 1, `{"content":[{"type":"text","text":"a1"}],`+sameModel+`,"stopReason":"stop"}`),
	turnEnd(1, "stop"), // 7
	turnStart(2), user(2, "q2"),
	hostMessage(2, 0, `{"content":[{"type":"toolCall","id":"c2","name":"ls","arguments":{}}],`+sameModel+`,"stopReason":"toolUse"}`), // 10
	`{"type":"system/message","turn":2,"content":"tools changed"}`,
	toolResult(2, "c2"), // 12
	hostMessage(2, 1, `{"content":[{"type":"text","text":"a2"}],`+sameModel+`,"stopReason":"stop"}`),
	turnEnd(2, "stop"), // 14
	`{"type":"context/compaction","content":[{"type":"text","text":"summary"}],"firstKeptSeq":12,"tokensBefore":900,"systemMessage":{"content":"be brief","sections":{"<env>":"x"}}}`, // 15
	`{"type":"context/message","origin":"bash","content":[{"type":"text","text":"Ran ls"}]}`,                                                                                          // 16
	turnStart(3), user(3, "q3"), // 18
	hostMessage(3, 0, `{"content":[{"type":"text","text":"a3"}],`+sameModel+`,"stopReason":"stop"}`),
	turnEnd(3, "stop"),
)

func TestCompactionKeepsSummaryKeptAndLaterMessages(t *testing.T) {
	res, diags := run(t, contextLog, replay.Options{Through: 14})
	if got, want := summary(res), "1:system 3:user 4:assistant/foreign 5:toolResult 6:assistant/foreign 9:user 10:assistant/foreign 12:toolResult 11:system 13:assistant/foreign"; got != want || len(diags) != 0 {
		t.Fatalf("before the compaction: %s, want %s (diagnostics %v)", got, want, diags)
	}
	res, _ = run(t, contextLog, replay.Options{})
	// The kept tool result's call was summarized: the result goes; the
	// system message in the kept range goes, the compaction's holds the
	// whole prompt; the bash output is user-role context.
	if got, want := summary(res), "15:system 15:user 13:assistant/foreign 16:user 18:user 19:assistant/foreign"; got != want {
		t.Fatalf("after the compaction: %s, want %s", got, want)
	}
	if res.Messages[0].Origin != replay.OriginCompaction || res.Messages[1].Origin != replay.OriginCompaction || res.Messages[3].Origin != "bash" {
		t.Errorf("origins %q %q %q", res.Messages[0].Origin, res.Messages[1].Origin, res.Messages[3].Origin)
	}
	if got := string(res.Messages[0].Message); got != `{"role":"system","content":"be brief","sections":{"<env>":"x"}}` {
		t.Errorf("the compaction's system message %s", got)
	}
	if res.Context != (replay.ContextInfo{CompactionSeq: 15, Compactions: 1}) {
		t.Errorf("context %+v", res.Context)
	}
	res, _ = run(t, contextLog, replay.Options{Target: turnlog.Adapter{ReleaseLine: "0.73"}})
	if got, want := summary(res), "15:user 13:assistant/foreign 16:user 18:user 19:assistant/foreign"; got != want {
		t.Errorf("on 0.73, which has no system messages: %s, want %s", got, want)
	}
}

func TestContextEdits(t *testing.T) {
	for _, tt := range []struct {
		name, edit, want, content string
	}{
		{"replace a user message", `{"type":"context/edit","targetSeq":3,"replacement":{"content":"q1, shorter"}}`,
			"1:system 3:user 4:assistant/foreign 5:toolResult 6:assistant/foreign", `"content":"q1, shorter"`},
		{"replace an assistant message with a string", `{"type":"context/edit","targetSeq":6,"replacement":{"content":"a1 edited"}}`,
			"1:system 3:user 4:assistant/foreign 5:toolResult 6:assistant/foreign", `"content":[{"type":"text","text":"a1 edited"}]`},
		{"remove the assistant message that made a call: its result goes too", `{"type":"context/edit","targetSeq":4,"replacement":null}`,
			"1:system 3:user 6:assistant/foreign", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			log := strings.Join(strings.SplitAfter(contextLog, "\n")[:8], "") +
				`{"seq":8,` + strings.TrimPrefix(tt.edit, "{") + "\n"
			res, _ := run(t, log, replay.Options{})
			if got := summary(res); got != tt.want {
				t.Fatalf("transcript %s, want %s", got, tt.want)
			}
			var all strings.Builder
			for _, m := range res.Messages {
				all.Write(m.Message)
			}
			if tt.content != "" && !strings.Contains(all.String(), tt.content) {
				t.Errorf("edited content missing %s: %s", tt.content, summary(res))
			}
			before, _ := run(t, log, replay.Options{Through: 7})
			if summary(before) != "1:system 3:user 4:assistant/foreign 5:toolResult 6:assistant/foreign" {
				t.Errorf("through the seq before the edit: %s", summary(before))
			}
		})
	}
}

// An edit replay cannot apply is reported as what it is: a context event
// not applied (its own code, no degrade cause), the message replayed as it
// was, and no degraded message counted.
func TestAnEditThatCannotBeApplied(t *testing.T) {
	log := strings.Join(strings.SplitAfter(contextLog, "\n")[:8], "") +
		`{"seq":8,"type":"context/edit","targetSeq":6,"replacement":{"content":[1]}}` + "\n"
	res, diags := run(t, log, replay.Options{})
	if got := summary(res); got != "1:system 3:user 4:assistant/foreign 5:toolResult 6:assistant/foreign" {
		t.Errorf("transcript %s: want the edited message as it was", got)
	}
	if !strings.Contains(string(res.Messages[len(res.Messages)-1].Message), `"text":"a1"`) {
		t.Errorf("seq 6 is %s, want its own text", res.Messages[len(res.Messages)-1].Message)
	}
	if len(diags) != 1 || diags[0].Code != replay.CodeInvalidContextEvent || diags[0].Seq != 8 || diags[0].Cause != "" ||
		!strings.Contains(diags[0].Message, "the edit of seq 6 cannot be applied") || !strings.Contains(diags[0].Message, "seq 6 is replayed as it was") {
		t.Errorf("diagnostics %+v, want one INVALID_CONTEXT_EVENT for seq 8 saying what was not applied and what replay did", diags)
	}
	if res.Counts.Degraded != 0 {
		t.Errorf("counts %+v: want no degraded message", res.Counts)
	}
}

// An edit of a message a compaction summarized changes nothing, as in
// pi-coding-agent: the message is no longer in the context.
func TestEditOfASummarizedMessage(t *testing.T) {
	compacted, _ := run(t, contextLog, replay.Options{})
	log := contextLog + `{"seq":21,"type":"context/edit","targetSeq":3,"replacement":null}` + "\n"
	res, _ := run(t, log, replay.Options{})
	if summary(res) != summary(compacted) || res.Context.Edits != 0 {
		t.Errorf("transcript %s (edits %d), want %s", summary(res), res.Context.Edits, summary(compacted))
	}
}
