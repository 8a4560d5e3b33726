package pirecord

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/test/internal/pihost"
)

// Drop, live: with refusedBlocks Drop, pi recording through the package
// stops sending the thinking blocks the provider refused, from the request
// after the response that reported them on; the request is otherwise pi's,
// and it is the request a host resuming from the Session's stored
// transcript sends. With Keep, the default, pi's requests are its own.

// signedBefore are signatures of the answers before the compaction of
// refusingConversation that the provider refuses after it (sig-3a, signed
// before it too, it does not).
var signedBefore = []string{"sig-1", "sig-2", "sig-3"}

// refusingConversation drives pi through three answers with signed
// thinking (the last with two blocks) and a /compact, then through turns
// whose replies refuse the blocks signed before the compaction but one, as Anthropic does once their prefix
// changed: a tool call (the refusal is reported on it) and the answer to
// its result, then one more answer. It returns the index of the first
// request after the compaction, whose response reports the refusals.
func refusingConversation(t *testing.T, pi *piProc, prov *provider) int {
	t.Helper()
	prov.Queue(signedAnswer("sig-1", "The launch is on Tuesday."))
	pi.Prompt("When is the launch?")
	prov.Queue(signedAnswer("sig-2", "Sunny."))
	pi.Prompt("And the weather?")
	// Two signed blocks in one answer: the provider refuses the second only.
	prov.Queue(reply{Blocks: []block{
		{Kind: "thinking", Text: "Think about: the weather.", Sig: "sig-3a"},
		{Kind: "thinking", Text: "Think about: A coat.", Sig: "sig-3"},
		{Kind: "text", Text: "A coat."},
	}, Stop: "end_turn"})
	pi.Prompt("What should I bring?")
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "The launch is on Tuesday; sunny."}}, Stop: "end_turn"},
		reply{Blocks: []block{{Kind: "text", Text: "The user asked what to bring."}}, Stop: "end_turn"})
	pi.Call(map[string]any{"type": "compact"})
	if n := prov.Pending(); n != 0 {
		t.Fatalf("the compaction asked for %d fewer summaries than scripted", n)
	}
	first := len(prov.Requests())
	prov.Queue(
		reply{Blocks: []block{
			{Kind: "thinking", Text: "Check the notes for the time.", Sig: "sig-4"},
			{Kind: "text", Text: "Let me check the notes."},
			{Kind: "tool_use", ID: "toolu_r1", Name: "read", Text: `{"path":"notes.txt"}`},
		}, Stop: "tool_use", Refuse: signedBefore},
		signedAnswer("sig-5", "At nine.", signedBefore...),
	)
	pi.Prompt("When does it start?")
	prov.Queue(signedAnswer("sig-6", "Two hours.", signedBefore...))
	pi.Prompt("How long is it?")
	return first
}

// piAlone runs refusingConversation in pi without the package's recording
// (no store: the package does nothing) and returns pi's own requests.
func piAlone(t *testing.T) []map[string]any {
	t.Helper()
	prov := newProvider(t)
	e := pihost.NewEnv(t, prov, "", "default", "unrecorded", "")
	pi := e.Start()
	refusingConversation(t, pi, prov)
	pi.Quit()
	return prov.Requests()
}

// refusedIn are the signatures of the blocks signed before the compaction
// that a request sent: the ones its response reports refused.
func refusedIn(t *testing.T, body map[string]any) []string {
	t.Helper()
	refused := slices.DeleteFunc(signatures(body), func(s string) bool { return !slices.Contains(signedBefore, s) })
	if len(refused) == 0 {
		t.Fatalf("the first request after the compaction sent no block signed before it: %v", signatures(body))
	}
	return refused
}

// messagesWithout are a request's messages without the thinking blocks
// signed with one of sigs.
func messagesWithout(body map[string]any, sigs []string) any {
	var msgs []any
	data, _ := json.Marshal(body["messages"])
	_ = json.Unmarshal(data, &msgs)
	for _, m := range msgs {
		m := m.(map[string]any)
		content, ok := m["content"].([]any)
		if !ok {
			continue
		}
		m["content"] = slices.DeleteFunc(content, func(c any) bool {
			b, _ := c.(map[string]any)
			sig, _ := b["signature"].(string)
			return b["type"] == "thinking" && slices.Contains(sigs, sig)
		})
	}
	return msgs
}

// sameRequests checks pi's requests against pi's own (alone) with the
// refused blocks left out of every request after the one whose response
// reported them (first); with refused empty, against pi's own as they are.
func sameRequests(t *testing.T, got, alone []map[string]any, first int, refused []string) {
	t.Helper()
	if len(got) != len(alone) {
		t.Fatalf("pi sent %d requests, %d without the package", len(got), len(alone))
	}
	for i := range got {
		var drop []string
		if i > first {
			drop = refused
		}
		want := messagesWithout(alone[i], drop)
		if g := messagesWithout(got[i], nil); !reflect.DeepEqual(g, want) {
			gj, _ := json.Marshal(g)
			wj, _ := json.Marshal(want)
			t.Errorf("request %d: the messages are not pi's own without %v:\n  sent %s\n  want %s", i, drop, gj, wj)
		}
	}
}

// checkDroppedLive checks the requests of refusingConversation recorded
// into a Session that drops refused blocks: from the request after the
// report on, every refused block is left out, every other signed block is
// sent, and nothing else changes. It returns the refused signatures.
func checkDroppedLive(t *testing.T, reqs []map[string]any, first int) []string {
	t.Helper()
	refused := refusedIn(t, reqs[first])
	kept := slices.DeleteFunc(signatures(reqs[first]), func(s string) bool { return slices.Contains(refused, s) })
	if !slices.Contains(kept, "sig-3a") {
		t.Fatalf("the first request after the compaction did not send sig-3a, which shares its message with a refused block: %v", signatures(reqs[first]))
	}
	for i, also := range map[int][]string{first + 1: {"sig-4"}, first + 2: {"sig-4", "sig-5"}} {
		sent := signatures(reqs[i])
		for _, s := range refused {
			if slices.Contains(sent, s) {
				t.Errorf("request %d sent block %s, which the provider refused (sent %v)", i, s, sent)
			}
		}
		for _, s := range append(slices.Clone(kept), also...) {
			if !slices.Contains(sent, s) {
				t.Errorf("request %d did not send signed block %s, which the provider did not refuse (sent %v)", i, s, sent)
			}
		}
	}
	sameRequests(t, reqs, piAlone(t), first, refused)
	return refused
}

// TestRefusedBlocksDroppedLiveForADroppingSession: pi records into a
// Session created with spec.adapter.refusedBlocks Drop (the controllers
// running, as on make dev). Once a response reports refused blocks, the
// next request (a tool result's, in the same turn) and the one after leave
// them out and send every other signed block, message for message pi's
// own requests otherwise; replay reads the one report, with no refusal it
// could not map; and pi's next request is the one pi-ai builds from the
// Session's stored transcript.
func TestRefusedBlocksDroppedLiveForADroppingSession(t *testing.T) {
	ctx := context.Background()
	const name = "chat-drop-live"
	tl, prov, e := recordWithTurnlog(t, name)
	adapter := turnlogv1.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "fake", Model: "model-a", ReleaseLine: "1",
		RefusedBlocks: agenthost.RefusedBlocksDrop}
	session := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: turnlogv1.SessionSpec{Adapter: adapter}}
	if err := tl.Client.Create(ctx, session); err != nil {
		t.Fatal(err)
	}
	pi := e.Start()
	first := refusingConversation(t, pi, prov)
	refused := checkDroppedLive(t, prov.Requests(), first)

	s := waitReplayed(t, tl, name)
	if got, want := s.Status.Replay.Refused, (turnlogv1.RefusedCounts{PrefixBindingMismatch: int64(len(refused)), Dropped: int64(len(refused))}); got != want {
		t.Errorf("the Session's status.replay.refused is %+v, want %+v: each refused block read once, from the one report, and left out", got, want)
	}

	// What a host resuming from the Session would send next is what pi sends.
	st, err := agenthost.OpenStore(ctx, tl.StoreURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := st.Log(agenthost.Location{Namespace: "default", Session: name, UID: string(s.UID)})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := l.WithTarget(agenthost.Adapter{Kind: adapter.Kind, API: adapter.API, Provider: adapter.Provider, Model: adapter.Model,
		ReleaseLine: adapter.ReleaseLine, RefusedBlocks: adapter.RefusedBlocks}).Transcript(ctx)
	if err != nil {
		t.Fatalf("read the stored transcript: %v", err)
	}
	const next = "Where is it?"
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "In the hall."}}, Stop: "end_turn"})
	pi.Prompt(next)
	reqs := prov.Requests()
	sent := reqs[len(reqs)-1]["messages"]
	want := requestFrom(t, prov, tr.Messages, next)
	if !reflect.DeepEqual(normalized(t, sent), normalized(t, want)) {
		sj, _ := json.Marshal(sent)
		wj, _ := json.Marshal(want)
		t.Errorf("pi's request after the stored transcript differs from the one pi-ai builds from that transcript:\n  pi   %s\n  from %s", sj, wj)
	}
	pi.Quit()
}

// TestRefusedBlocksDroppedLiveByTheSetting: without an API server,
// TURNLOG_REFUSED_BLOCKS=Drop drops refused blocks as a dropping Session
// does; started again on the session, pi still leaves them out, and sends
// the request pi-ai builds from the transcript replay of the log stores for
// a dropping target.
func TestRefusedBlocksDroppedLiveByTheSetting(t *testing.T) {
	prov := newProvider(t)
	ref := sessionRef{fileURL: "file://" + t.TempDir(), loc: agenthost.Location{Namespace: "default", Session: "chat-drop-env", UID: "d40f-env"}}
	e := newEnv(t, prov, ref.storeURL(), nil, ref.loc.Namespace, ref.loc.Session, ref.loc.UID)
	e.Vars = append(e.Vars, "TURNLOG_REFUSED_BLOCKS=Drop")
	pi := e.Start()
	first := refusingConversation(t, pi, prov)
	checkDroppedLive(t, prov.Requests(), first)
	file, _ := pi.Call(map[string]any{"type": "get_state"})["sessionFile"].(string)
	pi.Quit()

	target := agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "fake", Model: "model-a", ReleaseLine: "1", RefusedBlocks: "Drop"}
	tr := ref.stored(t, target)
	pi = e.Start("--session", file)
	const next = "Where is it?"
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "In the hall."}}, Stop: "end_turn"})
	pi.Prompt(next)
	reqs := prov.Requests()
	sent := reqs[len(reqs)-1]["messages"]
	if want := requestFrom(t, prov, tr.Messages, next); !reflect.DeepEqual(normalized(t, sent), normalized(t, want)) {
		sj, _ := json.Marshal(sent)
		wj, _ := json.Marshal(want)
		t.Errorf("pi started again sent a request that differs from the one pi-ai builds from the stored transcript:\n  pi   %s\n  from %s", sj, wj)
	}
	pi.Quit()

	// A setting that is neither says so, once, and pi keeps its blocks.
	prov = newProvider(t)
	ref.loc.Session, ref.loc.UID = "chat-drop-bad", "d40f-bad"
	e = newEnv(t, prov, ref.storeURL(), nil, ref.loc.Namespace, ref.loc.Session, ref.loc.UID)
	e.Vars = append(e.Vars, "TURNLOG_REFUSED_BLOCKS=drop")
	pi = e.Start()
	first = refusingConversation(t, pi, prov)
	pi.Quit()
	sameRequests(t, prov.Requests(), piAlone(t), first, nil)
	const bad = `turnlog: TURNLOG_REFUSED_BLOCKS "drop" is not "Drop" or "Keep"; refused blocks are sent as pi keeps them`
	said := strings.Join(pi.Notes, "\n") + "\n" + pi.Stderr()
	if got := strings.Count(said, bad+"\n"); got != 1 {
		t.Errorf("pi said %q %d times, want once; it said:\n%s", bad, got, said)
	}
}

// TestRefusedBlocksKeptLiveByDefault: recorded into a Session that keeps
// refused blocks (the default: the package creates the Session, the
// controllers running), pi's requests are the ones pi sends without the
// package, refused blocks and all.
func TestRefusedBlocksKeptLiveByDefault(t *testing.T) {
	tl, prov, e := recordWithTurnlog(t, "chat-keep-live")
	pi := e.Start()
	first := refusingConversation(t, pi, prov)
	pi.Quit()
	reqs := prov.Requests()
	refused := refusedIn(t, reqs[first])
	for _, i := range []int{first + 1, first + 2} {
		sent := signatures(reqs[i])
		for _, s := range refused {
			if !slices.Contains(sent, s) {
				t.Errorf("request %d did not send refused block %s, which pi keeps (sent %v)", i, s, sent)
			}
		}
	}
	sameRequests(t, reqs, piAlone(t), first, nil)
	if s := waitReplayed(t, tl, "chat-keep-live"); s.Status.Replay.Refused.Dropped != 0 {
		t.Errorf("the Session dropped %d refused blocks; it keeps them", s.Status.Replay.Refused.Dropped)
	}
}

// requestFrom is the messages of the request pi-ai builds for prov's model
// from a stored transcript and a user's next prompt.
func requestFrom(t *testing.T, prov *provider, transcript []replay.Message, prompt string) any {
	t.Helper()
	node, _, _ := pihost.Paths(t)
	msgs := make([]json.RawMessage, 0, len(transcript)+1)
	for _, m := range transcript {
		msgs = append(msgs, m.Message)
	}
	user, _ := json.Marshal(map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": prompt}}, "timestamp": 0})
	msgs = append(msgs, user)
	// The model as pi's models.json (pihost.NewEnv) declares it.
	model := map[string]any{"id": "model-a", "name": "model-a", "api": "anthropic-messages", "provider": "fake", "baseUrl": prov.URL(),
		"reasoning": true, "input": []string{"text"}, "cost": map[string]any{"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
		"contextWindow": 200000, "maxTokens": 4096}
	in, err := json.Marshal(map[string]any{"model": model, "messages": msgs})
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("testdata", "anthropic-request.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	// Evaluated in pi's directory, so that it imports the pi-ai pi runs on.
	cmd := exec.Command(node, "--input-type=module", "--eval", string(script))
	cmd.Dir = pihost.PiDir()
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("anthropic-request.mjs: %v\n%s", err, stderr.String())
	}
	var req struct {
		Messages any `json:"messages"`
	}
	if err := json.Unmarshal(out, &req); err != nil {
		t.Fatal(err)
	}
	return req.Messages
}

// normalized is v as JSON reads it back, so that values decoded from
// different sources compare alike.
func normalized(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
