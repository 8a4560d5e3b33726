package turnspans_test

import (
	"os"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/turnspans"
)

func readLog(t *testing.T, path string) []turnlog.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events []turnlog.Event
	for e, err := range turnlog.NewReader(f).All() {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	return events
}

// build returns the spans of every turn of events, turn by turn.
func build(id turnspans.Identity, opts turnspans.Options, events []turnlog.Event) [][]turnspans.Span {
	b := turnspans.NewBuilder(id, opts, -1)
	var turns [][]turnspans.Span
	for i := range events {
		if spans := b.Add(&events[i]); spans != nil {
			turns = append(turns, spans)
		}
	}
	return turns
}

func attr(s turnspans.Span, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

var source = turnspans.Identity{UID: "uid-source", Namespace: "team", Session: "chat"}

func TestTurnsAsSpans(t *testing.T) {
	events := readLog(t, "../../testdata/logs/tool-result-next-turn.jsonl")
	turns := build(source, turnspans.Options{}, events)
	if len(turns) != 3 {
		t.Fatalf("got spans of %d turns, want 3", len(turns))
	}
	var names [][]string
	seen := map[trace.SpanID]bool{}
	for i, spans := range turns {
		var n []string
		for _, s := range spans {
			n = append(n, s.Name)
			if s.Context.TraceID() != spans[0].Context.TraceID() {
				t.Errorf("turn %d: span %s in trace %s, not its turn's", i+1, s.Name, s.Context.TraceID())
			}
			if seen[s.Context.SpanID()] {
				t.Errorf("turn %d: span id of %s given twice", i+1, s.Name)
			}
			seen[s.Context.SpanID()] = true
			if v, _ := attr(s, "gen_ai.conversation.id"); v.AsString() != "uid-source" {
				t.Errorf("turn %d: %s has conversation id %q", i+1, s.Name, v.AsString())
			}
		}
		names = append(names, n)
	}
	want := [][]string{
		{"invoke_agent chat", "chat claude-sonnet-4-5", "execute_tool read_file"},
		{"invoke_agent chat", "chat claude-sonnet-4-5", "execute_tool bash", "execute_tool read_file"},
		{"invoke_agent chat", "chat claude-sonnet-4-5"},
	}
	if got := strings.Join(flat(names), "|"); got != strings.Join(flat(want), "|") {
		t.Errorf("spans:\n got %v\nwant %v", names, want)
	}
	// Turn 1 ends with toolUse: its call is answered in turn 2, so in
	// turn 1 it has no result.
	if s := turns[0][2]; s.Status != codes.Error {
		t.Errorf("a call with no result in its turn: status %v, want Error", s.Status)
	}
	// Turn 2 was aborted.
	if s := turns[1][0]; s.Status != codes.Error || !strings.Contains(s.Description, "aborted") {
		t.Errorf("aborted turn: status %v %q, want Error", s.Status, s.Description)
	}
	if v, _ := attr(turns[1][1], "gen_ai.response.finish_reasons"); strings.Join(v.AsStringSlice(), ",") != "aborted" {
		t.Errorf("aborted response's finish reasons %v", v.AsStringSlice())
	}
	// Each turn links to the one before.
	if l := turns[1][0].Links; len(l) != 1 || l[0].SpanContext.SpanID() != turns[0][0].Context.SpanID() {
		t.Errorf("turn 2's links %v, want turn 1's invoke_agent span", l)
	}
	// The same events give the same ids.
	again := build(source, turnspans.Options{}, events)
	for i := range turns {
		for j := range turns[i] {
			if !again[i][j].Context.Equal(turns[i][j].Context) {
				t.Errorf("turn %d span %d: ids differ between two builds", i+1, j)
			}
		}
	}
	// Another Session's same log gives other ids.
	other := build(turnspans.Identity{UID: "uid-other"}, turnspans.Options{}, events)
	if other[0][0].Context.TraceID() == turns[0][0].Context.TraceID() {
		t.Error("two Sessions' first turns share a trace id")
	}
}

func flat(s [][]string) []string {
	var out []string
	for _, x := range s {
		out = append(out, x...)
	}
	return out
}

func TestForkChildBuildsOnlyItsOwnTurns(t *testing.T) {
	events := readLog(t, "../../testdata/logs/aborted-turn.jsonl")
	parent := build(source, turnspans.Options{}, events)
	// The child is cut at turn 2's end (seq 15) and has turn 3 of its own.
	child := turnspans.Identity{UID: "uid-child", Namespace: "team", Session: "chat-fork",
		Fork: &turnspans.ForkSource{UID: source.UID, CutSeq: 15}}
	turns := build(child, turnspans.Options{}, events)
	if len(turns) != 1 {
		t.Fatalf("child built %d turns, want only turn 3", len(turns))
	}
	agent := turns[0][0]
	if v, _ := attr(agent, turnspans.AttrTurn); v.AsInt64() != 3 {
		t.Errorf("child's turn %d, want 3", v.AsInt64())
	}
	if len(agent.Links) != 1 || !agent.Links[0].SpanContext.Equal(parent[1][0].Context) {
		t.Errorf("child's first turn links to %v, want the source's turn 2 span %v", agent.Links, parent[1][0].Context)
	}
	if agent.Context.TraceID() == parent[2][0].Context.TraceID() {
		t.Error("the child's turn 3 has the source's turn 3 trace id")
	}
}

func TestContentOnlyWhenCaptured(t *testing.T) {
	events := readLog(t, "../../testdata/logs/tool-result-next-turn.jsonl")
	contentKeys := []attribute.Key{"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"}
	for _, s := range flatSpans(build(source, turnspans.Options{}, events)) {
		for _, k := range contentKeys {
			if _, ok := attr(s, k); ok {
				t.Errorf("content off: %s has %s", s.Name, k)
			}
		}
	}
	turns := build(source, turnspans.Options{CaptureContent: true}, events)
	in, _ := attr(turns[0][0], "gen_ai.input.messages")
	out, _ := attr(turns[0][1], "gen_ai.output.messages")
	args, _ := attr(turns[0][2], "gen_ai.tool.call.arguments")
	result, _ := attr(turns[1][3], "gen_ai.tool.call.result")
	for what, got := range map[string]struct{ v, want string }{
		"input":     {in.AsString(), "Why is the build slow?"},
		"output":    {out.AsString(), `"id":"toolu_02A","name":"read_file","arguments":{"path":"build.log"}`},
		"arguments": {args.AsString(), `{"path":"build.log"}`},
		"result":    {result.AsString(), "412 of 415 packages"},
	} {
		if !strings.Contains(got.v, got.want) {
			t.Errorf("%s: %q does not hold %q", what, got.v, got.want)
		}
	}
}

func flatSpans(turns [][]turnspans.Span) []turnspans.Span {
	var out []turnspans.Span
	for _, t := range turns {
		out = append(out, t...)
	}
	return out
}
