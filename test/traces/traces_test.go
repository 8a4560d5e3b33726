package traces

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/telemetry"
	"github.com/turnlog/turnlog/internal/testutil/jaeger"
	"github.com/turnlog/turnlog/turnlogtest"
)

var model = agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}

var usage = map[string]int{"input": 100, "output": 20, "cacheRead": 30, "cacheWrite": 0, "totalTokens": 150}

// conversation is the source Session's three turns: a tool call and its
// result, an aborted answer, a plain one.
var conversation = [][]agenthost.Event{{
	agenthost.TurnStart(1),
	agenthost.UserText(1, "Why is the build slow?"),
	agenthost.ResponseStart(1, 0, model),
	agenthost.ToolCallDelta(1, 0, 0, "toolu_1", "read_file", `{"path":"build.log"}`),
	agenthost.ResponseFinish(1, 0, agenthost.StopReasonToolUse, nil, usage),
	agenthost.ToolResult(1, "toolu_1", "read_file", false, agenthost.Block{Type: "text", Text: "cache miss: 412 of 415"}),
	agenthost.ResponseStart(1, 1, model),
	agenthost.TextDelta(1, 1, 0, "The cache misses."),
	agenthost.ResponseFinish(1, 1, agenthost.StopReasonStop, nil, usage),
	agenthost.TurnEnd(1, agenthost.StopReasonStop),
}, {
	agenthost.TurnStart(2),
	agenthost.UserText(2, "Write a long essay about it."),
	agenthost.ResponseStart(2, 0, model),
	agenthost.TextDelta(2, 0, 0, "Caches began"),
	agenthost.ResponseFinish(2, 0, agenthost.StopReasonAborted, nil, nil),
	agenthost.TurnEnd(2, agenthost.StopReasonAborted),
}, {
	agenthost.TurnStart(3),
	agenthost.UserText(3, "One sentence, please."),
	agenthost.ResponseStart(3, 0, model),
	agenthost.TextDelta(3, 0, 0, "Mount the cache."),
	agenthost.ResponseFinish(3, 0, agenthost.StopReasonStop, nil, usage),
	agenthost.TurnEnd(3, agenthost.StopReasonStop),
}}

// childTurn is the fork's own turn, after the source's turn 2.
var childTurn = []agenthost.Event{
	agenthost.TurnStart(3),
	agenthost.UserText(3, "Try again, shorter."),
	agenthost.ResponseStart(3, 0, model),
	agenthost.TextDelta(3, 0, 0, "Caches save work."),
	agenthost.ResponseFinish(3, 0, agenthost.StopReasonStop, nil, usage),
	agenthost.TurnEnd(3, agenthost.StopReasonStop),
}

// grandchildTurn is the turn of a fork of the fork, after the source's
// turn 1.
var grandchildTurn = []agenthost.Event{
	agenthost.TurnStart(2),
	agenthost.UserText(2, "Just the cause."),
	agenthost.ResponseStart(2, 0, model),
	agenthost.TextDelta(2, 0, 0, "A cold cache."),
	agenthost.ResponseFinish(2, 0, agenthost.StopReasonStop, nil, usage),
	agenthost.TurnEnd(2, agenthost.StopReasonStop),
}

// exportTo starts the process's span export to j, as the manager's, for
// the test's life.
func exportTo(ctx context.Context, t *testing.T, j *jaeger.Jaeger) *telemetry.Telemetry {
	t.Helper()
	tel, err := telemetry.Start(ctx, telemetry.Flags{Endpoint: j.OTLPHTTP, Protocol: telemetry.ProtocolHTTP}, "turnlog-manager")
	if err != nil || tel == nil {
		t.Fatalf("start the export: %v", err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel
}

func TestSessionsAsTraces(t *testing.T) {
	j := jaeger.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tel := exportTo(ctx, t, j)
	env := turnlogtest.Start(t)
	st, err := agenthost.OpenStore(ctx, env.StoreURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	chat, err := st.CreateSession(ctx, env.Client, "default", "chat", model)
	if err != nil {
		t.Fatal(err)
	}
	turnEnds := make([]int64, len(conversation))
	for i, events := range conversation {
		turnEnds[i] = appendTurn(ctx, t, chat, i == 0, events)
	}
	child, cut, err := st.Fork(ctx, env.Client, "default", "chat", fmt.Sprint(turnEnds[1]), "chat-fork")
	if err != nil {
		t.Fatal(err)
	}
	if cut != turnEnds[1] {
		t.Fatalf("fork cut at %d, want turn 2's end %d", cut, turnEnds[1])
	}
	appendTurn(ctx, t, child, false, childTurn)
	// A fork of the fork, cut in the turns the fork copied: its first turn
	// follows from the source's turn 1, not from anything of the fork's.
	grandchild, _, err := st.Fork(ctx, env.Client, "default", "chat-fork", fmt.Sprint(turnEnds[0]), "chat-fork-2")
	if err != nil {
		t.Fatal(err)
	}
	appendTurn(ctx, t, grandchild, false, grandchildTurn)

	source, forked, forked2 := uidOf(ctx, t, env, "chat"), uidOf(ctx, t, env, "chat-fork"), uidOf(ctx, t, env, "chat-fork-2")
	want := map[string][][]string{
		source: {
			{"invoke_agent chat", "chat claude-sonnet-4-5", "execute_tool read_file", "chat claude-sonnet-4-5"},
			{"invoke_agent chat", "chat claude-sonnet-4-5"},
			{"invoke_agent chat", "chat claude-sonnet-4-5"},
		},
		forked:  {{"invoke_agent chat-fork", "chat claude-sonnet-4-5"}},
		forked2: {{"invoke_agent chat-fork-2", "chat claude-sonnet-4-5"}},
	}
	const total = 4 + 2 + 2 + 2 + 2
	raw := waitRawSpans(ctx, t, j, tel, total)
	checkOnce(t, raw, total)
	traces := map[string][]jaeger.Trace{}
	for uid := range want {
		traces[uid] = turnTraces(t, j, uid)
		if got := spanNames(traces[uid]); !slices.EqualFunc(got, want[uid], slices.Equal) {
			t.Errorf("conversation %s: traces %q, want %q", uid, got, want[uid])
		}
	}
	if t.Failed() {
		return
	}
	checkAttributes(t, traces[source], source)
	checkForkLink(t, traces[forked][0], traces[source][1])
	checkForkLink(t, traces[forked2][0], traces[source][0])
	checkOwnSpans(t, j)

	// The source's assembly checkpoint is lost: the next run reads every
	// turn again, and exports none of them again.
	redoAssembly(ctx, t, env, chat)
	checkOnce(t, waitRawSpans(ctx, t, j, tel, total), total)
}

// appendTurn appends a turn, waits for its transcript (assembly, then
// replay, have run) and returns the seq of its turn/end.
func appendTurn(ctx context.Context, t *testing.T, log *agenthost.Log, first bool, events []agenthost.Event) int64 {
	t.Helper()
	end := writeTurn(ctx, t, log, first, events)
	if _, err := log.WaitTranscript(ctx, end); err != nil {
		t.Fatal(err)
	}
	return end
}

// writeTurn appends a turn, which nudges its Session, and returns the seq
// of its turn/end.
func writeTurn(ctx context.Context, t *testing.T, log *agenthost.Log, first bool, events []agenthost.Event) int64 {
	t.Helper()
	if first {
		events = append([]agenthost.Event{agenthost.SessionStart(model)}, events...)
	}
	a := log.Appender(agenthost.AppenderOptions{})
	if err := a.Add(ctx, events...); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	head, err := log.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return head.LastTurnEnd
}

func uidOf(ctx context.Context, t *testing.T, env *turnlogtest.Env, name string) string {
	t.Helper()
	var s turnlogv1.Session
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	return string(s.UID)
}

// waitRawSpans flushes the export and waits until Jaeger holds at least
// want spans of the sessions' service (more, if some came twice).
func waitRawSpans(ctx context.Context, t *testing.T, j *jaeger.Jaeger, tel *telemetry.Telemetry, want int) []jaeger.RawSpan {
	t.Helper()
	if err := tel.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		spans, err := j.RawSpans(telemetry.SessionsService)
		if err != nil {
			t.Fatal(err)
		}
		if len(spans) >= want {
			return spans
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Jaeger holds %d spans of %s, want %d", len(spans), telemetry.SessionsService, want)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkOnce: every span was received once.
func checkOnce(t *testing.T, spans []jaeger.RawSpan, want int) {
	t.Helper()
	seen := map[string]int{}
	for _, s := range spans {
		seen[s.TraceID+"/"+s.SpanID]++
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("span %s received %d times", id, n)
		}
	}
	if len(spans) != want {
		t.Errorf("Jaeger received %d spans of the sessions, want %d", len(spans), want)
	}
}

// turnTraces are a conversation's traces, oldest turn first, through the
// query API.
func turnTraces(t *testing.T, j *jaeger.Jaeger, uid string) []jaeger.Trace {
	t.Helper()
	traces, err := j.Traces(telemetry.SessionsService, map[string]string{"gen_ai.conversation.id": uid}, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i := range traces {
		slices.SortStableFunc(traces[i].Spans, func(a, b jaeger.Span) int { return spanOrder(a) - spanOrder(b) })
	}
	slices.SortFunc(traces, func(a, b jaeger.Trace) int {
		return strings.Compare(root(a).Tag("turnlog.turn"), root(b).Tag("turnlog.turn"))
	})
	return traces
}

// spanOrder puts the invoke_agent span first, then the rest by seq.
func spanOrder(s jaeger.Span) int {
	if strings.HasPrefix(s.OperationName, "invoke_agent") {
		return -1
	}
	var seq int
	fmt.Sscan(s.Tag("turnlog.seq"), &seq)
	return seq
}

func root(tr jaeger.Trace) jaeger.Span { return tr.Spans[0] }

func spanNames(traces []jaeger.Trace) [][]string {
	var out [][]string
	for _, tr := range traces {
		var names []string
		for _, s := range tr.Spans {
			names = append(names, s.OperationName)
		}
		out = append(out, names)
	}
	return out
}

// checkAttributes holds the source's spans to the conventions.
func checkAttributes(t *testing.T, traces []jaeger.Trace, uid string) {
	t.Helper()
	agent, chat, tool := root(traces[0]), traces[0].Spans[1], traces[0].Spans[2]
	for _, c := range []struct {
		span       jaeger.Span
		key, value string
	}{
		{agent, "gen_ai.operation.name", "invoke_agent"},
		{agent, "gen_ai.conversation.id", uid},
		{agent, "gen_ai.usage.input_tokens", "260"},
		{agent, "gen_ai.usage.output_tokens", "40"},
		{agent, "turnlog.turn", "1"},
		{chat, "gen_ai.operation.name", "chat"},
		{chat, "gen_ai.provider.name", "anthropic"},
		{chat, "gen_ai.request.model", "claude-sonnet-4-5"},
		{chat, "gen_ai.usage.input_tokens", "130"},
		{chat, "gen_ai.usage.cache_read.input_tokens", "30"},
		{chat, "gen_ai.conversation.id", uid},
		{tool, "gen_ai.operation.name", "execute_tool"},
		{tool, "gen_ai.tool.name", "read_file"},
		{tool, "gen_ai.tool.call.id", "toolu_1"},
		{root(traces[1]), "otel.status_code", "ERROR"},
		{traces[1].Spans[1], "otel.status_code", "ERROR"},
	} {
		if got := c.span.Tag(c.key); got != c.value {
			t.Errorf("%s: %s = %q, want %q", c.span.OperationName, c.key, got, c.value)
		}
	}
	if got := chat.Tag("gen_ai.response.finish_reasons"); !strings.Contains(got, "toolUse") {
		t.Errorf("chat: finish reasons %q, want toolUse", got)
	}
	if got := root(traces[0]).Tag("gen_ai.input.messages"); got != "" {
		t.Errorf("content captured though not asked for: %q", got)
	}
	if got := root(traces[0]).Tag("otel.status_code"); got == "ERROR" {
		t.Error("a turn that ended stop has error status")
	}
	for _, tr := range traces {
		for _, s := range tr.Spans[1:] {
			if len(s.References) == 0 || s.References[0].RefType != "CHILD_OF" || s.References[0].SpanID != root(tr).SpanID {
				t.Errorf("%s: references %v, want a child of its turn's %s", s.OperationName, s.References, root(tr).SpanID)
			}
		}
	}
}

// checkForkLink: a fork's first turn follows from the turn it was cut at.
func checkForkLink(t *testing.T, child, cutTurn jaeger.Trace) {
	t.Helper()
	for _, r := range root(child).References {
		if r.RefType == "FOLLOWS_FROM" && r.TraceID == cutTurn.TraceID && r.SpanID == root(cutTurn).SpanID {
			return
		}
	}
	t.Errorf("the fork's first turn references %v, want a link to the cut turn's span %s/%s",
		root(child).References, cutTurn.TraceID, root(cutTurn).SpanID)
}

// redoAssembly deletes the Session's assembly checkpoint, nudges it and
// waits until a run has stored a new one, reading the whole log again.
func redoAssembly(ctx context.Context, t *testing.T, env *turnlogtest.Env, chat *agenthost.Log) {
	t.Helper()
	b, err := store.Open(ctx, env.StoreURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	loc := chat.Location()
	log, err := sessionlog.New(b).Log(sessionlog.Location{Prefix: loc.Prefix, Namespace: loc.Namespace, Session: loc.Session, UID: loc.UID})
	if err != nil {
		t.Fatal(err)
	}
	dl := derived.StoreLog{Log: log}
	if err := dl.DeleteDerived(ctx, derived.AssemblyCheckpointName); err != nil {
		t.Fatal(err)
	}
	if err := chat.Nudge(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := dl.GetDerived(ctx, derived.AssemblyCheckpointName, 0)
		if err == nil {
			return
		}
		if !errors.Is(err, derived.ErrNotFound) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("no assembly run stored a checkpoint again")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkOwnSpans: turnlog's own work is traced under the manager's
// service: a Session's reconcile with its steps and the worker run the
// work step ran, a fork's reconcile with its copy.
func checkOwnSpans(t *testing.T, j *jaeger.Jaeger) {
	t.Helper()
	for _, c := range []struct {
		operation string
		children  []string
	}{
		{"reconcile Session", []string{"reconcileLog", "reconcileDerived", "reconcileWork", "worker assemble"}},
		{"reconcile SessionFork", []string{"reconcileSource", "reconcileCut", "reconcileChild", "reconcileCopy"}},
	} {
		traces, err := j.Traces("turnlog-manager", nil, 1000)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, tr := range traces {
			if !slices.ContainsFunc(tr.Spans, func(s jaeger.Span) bool { return s.OperationName == c.operation }) {
				continue
			}
			for _, s := range tr.Spans {
				seen[s.OperationName] = true
				if s.OperationName == "worker assemble" && s.Tag("turnlog.session") == "" {
					t.Errorf("worker assemble: no turnlog.session attribute: %v", s.Tags)
				}
			}
		}
		for _, want := range c.children {
			if !seen[want] {
				t.Errorf("no %s trace holds a %s span (spans seen: %v)", c.operation, want, slices.Sorted(maps.Keys(seen)))
			}
		}
	}
}
