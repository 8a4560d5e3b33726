package agenthost

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// The context event builders write events the log accepts, and replay
// gives the transcript a host sends after them: the system prompt, then
// after a compaction its summary and what it kept, inserted context as user
// messages, and an edited message's new content.
func TestContextEventBuilders(t *testing.T) {
	model := Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}
	rules := "<rules>be brief</rules>"
	answer := func(turn int64, text string) Event {
		return AssistantMessageEvent(turn, 0, AssistantMessage{Content: []Block{{Type: turnlog.BlockText, Text: text}},
			API: model.API, Provider: model.Provider, Model: model.Model, StopReason: StopReasonStop})
	}
	events := []Event{
		SessionStart(model),
		SystemMessageEvent(0, SystemMessage{Content: "You are a coding agent.", Sections: map[string]*string{"rules": &rules},
			ToolsAdded: []any{map[string]any{"name": "grep", "parameters": map[string]any{"type": "object"}}}}),
		TurnStart(1), UserText(1, "first question"), answer(1, "first answer"), TurnEnd(1, StopReasonStop), // 2-5
		ContextMessage(0, "bash", Block{Type: turnlog.BlockText, Text: "Ran `ls`\n```\na.go\n```"}), // 6
		TurnStart(2), UserText(2, "second question"), answer(2, "second answer"), TurnEnd(2, StopReasonStop), // 7-10
		Compaction(0, []Block{{Type: turnlog.BlockText, Text: "The user asked two questions."}}, 8, 5000,
			&SystemMessage{Content: "You are a coding agent.", ToolsAdded: []any{map[string]any{"name": "grep"}}}), // 11
		ContextEdit(0, 9, []Block{{Type: turnlog.BlockText, Text: "second answer, shorter"}}), // 12
		TurnStart(3), UserText(3, "third question"), answer(3, "third answer"), TurnEnd(3, StopReasonStop),
	}
	var log bytes.Buffer
	v := turnlog.NewValidator()
	for i, ev := range events {
		line := withSeq(ev.data, int64(i))
		e, err := turnlog.DecodeEvent(line)
		if err == nil {
			err = v.Check(&e)
		}
		if err != nil {
			t.Fatalf("event %d (%s): %v", i, ev.typ, err)
		}
		log.Write(line)
		log.WriteByte('\n')
	}
	res, err := replay.Transcript(turnlog.NewReader(&log).All(), replay.Options{Through: replay.Head})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range res.Messages {
		got = append(got, m.Role+":"+string(m.Message))
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		`system:{"role":"system","content":"You are a coding agent.","toolsAdded":[{"name":"grep"}]`,
		`user:{"role":"user","content":[{"type":"text","text":"The user asked two questions."}]`,
		`user:{"role":"user","content":[{"type":"text","text":"second question"}]`,
		`"text":"second answer, shorter"`,
		`"text":"third answer"`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("transcript lacks %s:\n%s", want, all)
		}
	}
	if len(res.Messages) != 6 || strings.Contains(all, "first question") || strings.Contains(all, "Ran `ls`") {
		t.Errorf("after the compaction the transcript holds %d messages, want 6 (system, summary, kept 2, third turn 2):\n%s", len(res.Messages), all)
	}
}

// withSeq is the event's JSON as a log line at seq.
func withSeq(data []byte, seq int64) []byte {
	return append(fmt.Appendf(nil, `{"seq":%d,`, seq), data[1:]...)
}
