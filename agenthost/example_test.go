package agenthost_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/turnlog/turnlog/agenthost"
)

var sonnet = agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}

// A host streams one turn — a user message, a response with reasoning and
// text, its finish with pi-ai's version-2 replay state — into a Session's
// log. The finish and the turn's end are flushed at once; the deltas in
// between wait for the flush interval or for them.
func ExampleLog_Appender() {
	ctx := context.Background()
	st, err := agenthost.OpenStore(ctx, "mem://", nil) // s3://bucket?region=... in production
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	l, err := st.Log(agenthost.Location{Namespace: "team-a", Session: "chat-1", UID: "9f2c41d0"})
	if err != nil {
		log.Fatal(err)
	}

	a := l.Appender(agenthost.AppenderOptions{})
	err = a.Add(ctx,
		agenthost.SessionStart(sonnet),
		agenthost.TurnStart(1),
		agenthost.UserText(1, "Find every TODO."),
		agenthost.ResponseStart(1, 0, sonnet),
		agenthost.ThinkingDelta(1, 0, 0, "Grep is quickest.", false),
		agenthost.TextDelta(1, 0, 1, "I'll grep for TODO."),
		agenthost.ResponseFinish(1, 0, agenthost.StopReasonStop, &agenthost.Envelope{
			Response: map[string]string{"id": "msg_01"},
			Blocks:   []*agenthost.BlockState{{Type: "thinking", Signature: "EqQBsig"}, {Type: "text"}},
		}, nil),
		agenthost.TurnEnd(1, agenthost.StopReasonStop),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		log.Fatal(err)
	}
	h, err := l.Head(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("next seq %d, last turn/end at %d\n", h.Next, h.LastTurnEnd)
	// Output: next seq 8, last turn/end at 7
}

// Before the workers have replayed a turn of the log, Transcript says so;
// WaitTranscript waits for them.
func ExampleLog_Transcript() {
	ctx := context.Background()
	st, err := agenthost.OpenStore(ctx, "mem://", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	l, err := st.Log(agenthost.Location{Namespace: "team-a", Session: "chat-2", UID: "5e0b7a13"})
	if err != nil {
		log.Fatal(err)
	}
	_, err = l.Transcript(ctx)
	fmt.Println(errors.Is(err, agenthost.ErrNotReplayed), err)
	// Output: true not replayed yet: no turn of the log has been replayed for this target
}

// The finish of a response carries pi-ai's version-2 envelope, its block
// entries aligned with the blocks the stream emitted.
func ExampleResponseFinish() {
	e := agenthost.ResponseFinish(3, 0, agenthost.StopReasonToolUse, &agenthost.Envelope{
		Response: map[string]string{"id": "resp_7"},
		Blocks:   []*agenthost.BlockState{nil, {Type: "toolCall", Signature: "sig-tc"}},
	}, nil)
	var v struct {
		Type        string          `json:"type"`
		Turn        int             `json:"turn"`
		StopReason  string          `json:"stopReason"`
		ReplayState json.RawMessage `json:"replayState"`
	}
	data, _ := json.Marshal(e)
	if err := json.Unmarshal(data, &v); err != nil {
		log.Fatal(err)
	}
	fmt.Println(v.Type, v.Turn, v.StopReason)
	fmt.Println(string(v.ReplayState))
	// Output:
	// response/finish 3 toolUse
	// {"kind":"pi-ai","version":2,"response":{"id":"resp_7"},"blocks":[null,{"type":"toolCall","signature":"sig-tc"}]}
}
