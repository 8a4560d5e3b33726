package examples

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/turnlogtest"
)

var sonnet = agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}

// TestHostAgainstTurnlog is a host's test against a running turnlog: it
// streams two turns into a Session — the second stopped by the user half
// way —, forks the Session at the second with a SessionFork, and checks
// the child's transcript, which the child's first request would be built
// from.
func TestHostAgainstTurnlog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tl := turnlogtest.Start(t)

	st, err := agenthost.OpenStore(ctx, tl.StoreURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	chat, err := st.CreateSession(ctx, tl.Client, "default", "chat", sonnet)
	if err != nil {
		t.Fatal(err)
	}
	a := chat.Appender(agenthost.AppenderOptions{})
	steps := [][]agenthost.Event{
		{agenthost.SessionStart(sonnet)},
		// Turn 1: a complete answer, its reasoning signed by the provider.
		{agenthost.TurnStart(1), agenthost.UserText(1, "What is the capital of France?"),
			agenthost.ResponseStart(1, 0, sonnet), agenthost.ThinkingDelta(1, 0, 0, "A geography question.", false)},
		{agenthost.TextDelta(1, 0, 1, "The capital ")},
		{agenthost.TextDelta(1, 0, 1, "is Paris.")},
		{agenthost.ResponseFinish(1, 0, agenthost.StopReasonStop, &agenthost.Envelope{
			Blocks: []*agenthost.BlockState{{Type: "thinking", Signature: "sig-think-1"}, {Type: "text"}},
		}, nil),
			agenthost.TurnEnd(1, agenthost.StopReasonStop)},
		// Turn 2: stopped by the user; the partial answer is in the log
		// but in no transcript.
		{agenthost.TurnStart(2), agenthost.UserText(2, "And of Spain?"),
			agenthost.ResponseStart(2, 0, sonnet), agenthost.TextDelta(2, 0, 0, "Madrid became the capital in 1561, when")},
		{agenthost.ResponseFinish(2, 0, agenthost.StopReasonAborted, nil, nil), agenthost.TurnEnd(2, agenthost.StopReasonAborted)},
	}
	for _, events := range steps {
		if err := a.Add(ctx, events...); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	head, err := chat.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	turns, err := chat.Turns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 2 {
		t.Fatalf("the log has %d turns, want 2: %+v", len(turns), turns)
	}

	// Fork at the second turn's first event: the cut is that turn's end.
	child, cut, err := st.Fork(ctx, tl.Client, "default", "chat", fmt.Sprint(turns[1].StartSeq), "chat-retry")
	if err != nil {
		t.Fatal(err)
	}
	if cut != head.LastTurnEnd {
		t.Errorf("cut at seq %d, want turn 2's end, seq %d", cut, head.LastTurnEnd)
	}
	session := &turnlogv1.Session{}
	for {
		if err := tl.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "chat-retry"}, session); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(session.Status.Conditions, turnlogv1.ConditionReady)
		if c != nil && c.Status == "True" && session.Status.ObservedGeneration == session.Generation {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the child Session is not Ready: %+v", session.Status.Conditions)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if f := session.Spec.ForkedFrom; f == nil || f.Session != "chat" || f.CutSeq != cut {
		t.Errorf("child's spec.forkedFrom = %+v, want chat cut at seq %d", f, cut)
	}

	tr, err := child.WaitTranscript(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	if tr.ThroughSeq != cut {
		t.Errorf("child's transcript through seq %d, want %d", tr.ThroughSeq, cut)
	}
	var got []string
	for _, m := range tr.Messages {
		got = append(got, m.Role+": "+text(t, m.Message))
	}
	want := []string{
		"user: What is the capital of France?",
		"assistant: [A geography question.] The capital is Paris.",
		"user: And of Spain?",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("child's transcript:\n%q\nwant\n%q", got, want)
	}
	// The provider's signature is kept: the next request replays the
	// reasoning natively rather than as plain text.
	if tr.Counts.Native != 1 || tr.Counts.Degraded != 0 {
		t.Errorf("replay counts %+v, want the one answer native", tr.Counts)
	}
}

// text renders a pi-ai message's content: text as is, reasoning in
// brackets.
func text(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var m struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var blocks []struct {
		Type, Text, Thinking string
	}
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		t.Fatalf("content %s: %v", m.Content, err)
	}
	out := ""
	for _, b := range blocks {
		if out != "" {
			out += " "
		}
		switch b.Type {
		case "thinking":
			out += "[" + b.Thinking + "]"
		default:
			out += b.Text
		}
	}
	return out
}
