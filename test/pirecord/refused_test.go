package pirecord

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/turnlogtest"
)

// TestRefusedBlocksFromPi: pi 1.6 records a session through turnlog (the
// controllers as on make dev); after a /compact the fake Anthropic provider
// refuses the earlier thinking blocks pi sends again, reporting them in
// input_transformations as Anthropic does, and pi records the report. The
// Session counts each refused block once and raises one ReplayStateRefused
// Event for it; a SessionFork whose child drops refused blocks gives a
// child whose transcript — what pi sends once /turnlog-open continues it —
// holds none of them and every other signed block.
func TestRefusedBlocksFromPi(t *testing.T) {
	ctx := context.Background()
	tl, prov, e := recordWithTurnlog(t, "chat-refused")
	pi := e.Start()
	prov.Queue(signedAnswer("sig-1", "The launch is on Tuesday."))
	pi.Prompt("When is the launch?")
	prov.Queue(signedAnswer("sig-2", "Sunny."))
	pi.Prompt("And the weather?")
	prov.Queue(signedAnswer("sig-3", "A coat."))
	pi.Prompt("What should I bring?")
	// The compaction summarizes the history and the turn it cuts.
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "The launch is on Tuesday; sunny."}}, Stop: "end_turn"},
		reply{Blocks: []block{{Kind: "text", Text: "The user asked what to bring."}}, Stop: "end_turn"})
	pi.Call(map[string]any{"type": "compact"})
	if n := prov.Pending(); n != 0 {
		t.Fatalf("the compaction asked for %d fewer summaries than scripted", n)
	}

	// After the compaction the provider refuses the blocks signed before it.
	before := []string{"sig-1", "sig-2", "sig-3"}
	prov.Queue(signedAnswer("sig-4", "At nine.", before...))
	pi.Prompt("When does it start?")
	prov.Queue(signedAnswer("sig-5", "Two hours.", before...))
	pi.Prompt("How long is it?")
	reqs := prov.Requests()
	refused := slices.DeleteFunc(signatures(reqs[len(reqs)-2]), func(s string) bool { return !slices.Contains(before, s) })
	if len(refused) == 0 {
		t.Fatalf("the first request after the compaction sent no block signed before it: %v", signatures(reqs[len(reqs)-2]))
	}
	// pi keeps them: the next request sends them again.
	lastParent := signatures(reqs[len(reqs)-1])
	for _, s := range refused {
		if !slices.Contains(lastParent, s) {
			t.Fatalf("pi did not send refused block %s again (sent %v)", s, lastParent)
		}
	}
	t.Logf("refused after the compaction: %v; the last request sent %v", refused, lastParent)

	parent := waitReplayed(t, tl, "chat-refused")
	if got, want := parent.Status.Replay.Refused, (turnlogv1.RefusedCounts{PrefixBindingMismatch: int64(len(refused))}); got != want {
		t.Errorf("the Session's status.replay.refused is %+v, want %+v", got, want)
	}
	if n := len(refusedEvents(t, tl, "chat-refused", "kept, as pi keeps it")); n != len(refused) {
		t.Errorf("%d ReplayStateRefused Events saying the block is kept, want one per refused block (%d)", n, len(refused))
	}

	// A child that drops them.
	fork := &turnlogv1.SessionFork{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "chat-refused-dropping"},
		Spec: turnlogv1.SessionForkSpec{Source: turnlogv1.SessionReference{Name: "chat-refused"}, AtSeq: fmt.Sprint(*parent.Status.HeadSeq),
			Target: turnlogv1.ForkTarget{RefusedBlocks: agenthost.RefusedBlocksDrop}}}
	if err := tl.Client.Create(ctx, fork); err != nil {
		t.Fatal(err)
	}
	child := waitReplayed(t, tl, "chat-refused-dropping")
	if got, want := child.Status.Replay.Refused, (turnlogv1.RefusedCounts{PrefixBindingMismatch: int64(len(refused)), Dropped: int64(len(refused))}); got != want {
		t.Errorf("the child's status.replay.refused is %+v, want %+v", got, want)
	}
	if n := len(refusedEvents(t, tl, "chat-refused-dropping", "left out of the transcript")); n != len(refused) {
		t.Errorf("%d ReplayStateRefused Events on the child saying the block is left out, want %d", n, len(refused))
	}

	pi.Call(map[string]any{"type": "prompt", "message": "/turnlog-open default/chat-refused-dropping"})
	prov.Queue(signedAnswer("sig-6", "Nothing else."))
	pi.Prompt("Anything else?")
	reqs = prov.Requests()
	sent := signatures(reqs[len(reqs)-1])
	for _, s := range refused {
		if slices.Contains(sent, s) {
			t.Errorf("pi continuing the child sent refused block %s (sent %v)", s, sent)
		}
	}
	for _, s := range append(slices.DeleteFunc(slices.Clone(lastParent), func(s string) bool { return slices.Contains(refused, s) }), "sig-5") {
		if !slices.Contains(sent, s) {
			t.Errorf("pi continuing the child did not send signed block %s, which the provider did not refuse (sent %v)", s, sent)
		}
	}
	pi.Quit()
}

// signatures are the signatures of a request's thinking blocks, in order.
func signatures(body map[string]any) []string {
	var out []string
	msgs, _ := body["messages"].([]any)
	for _, m := range msgs {
		content, _ := m.(map[string]any)["content"].([]any)
		for _, c := range content {
			if b, _ := c.(map[string]any); b["type"] == "thinking" {
				sig, _ := b["signature"].(string)
				out = append(out, sig)
			}
		}
	}
	return out
}

// waitReplayed waits for the Session to be Ready with its log replayed
// through its head, and returns it.
func waitReplayed(t *testing.T, tl *turnlogtest.Env, name string) *turnlogv1.Session {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var s turnlogv1.Session
		if err := tl.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &s); err == nil {
			c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady)
			if c != nil && c.Status == metav1.ConditionTrue && s.Status.Replay != nil && s.Status.HeadSeq != nil && s.Status.Replay.ThroughSeq == *s.Status.HeadSeq {
				return &s
			}
			if time.Now().After(deadline) {
				t.Fatalf("Session %s is not replayed through its head: %+v", name, s.Status)
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("Session %s: %v", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// refusedEvents are the ReplayStateRefused Events on a Session whose note
// says what was done with the block.
func refusedEvents(t *testing.T, tl *turnlogtest.Env, name, done string) []eventsv1.Event {
	t.Helper()
	var out []eventsv1.Event
	deadline := time.Now().Add(30 * time.Second)
	for {
		var list eventsv1.EventList
		if err := tl.Client.List(context.Background(), &list, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		out = out[:0]
		for _, ev := range list.Items {
			if ev.Regarding.Name == name && ev.Reason == turnlogv1.EventReplayStateRefused && strings.Contains(ev.Note, done) {
				out = append(out, ev)
			}
		}
		if len(out) > 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// signedAnswer is a reply with a signed thinking block and text; the
// provider reports it refused the blocks signed refuse, as Anthropic does.
func signedAnswer(sig, text string, refuse ...string) reply {
	return reply{Blocks: []block{{Kind: "thinking", Text: "Think about: " + text, Sig: sig}, {Kind: "text", Text: text}}, Stop: "end_turn", Refuse: refuse}
}
