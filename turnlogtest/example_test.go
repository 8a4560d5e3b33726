package turnlogtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/turnlogtest"
)

// A host's test streams a turn into a Session and reads back the
// transcript turnlog's controllers replayed. In a test, Start(t) does what
// New and Stop do here, failing t rather than exiting.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tl, err := turnlogtest.New(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tl.Stop()

	model := agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}
	st, err := agenthost.OpenStore(ctx, tl.StoreURL, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	chat, err := st.CreateSession(ctx, tl.Client, "default", "chat-1", model)
	if err != nil {
		log.Fatal(err)
	}
	a := chat.Appender(agenthost.AppenderOptions{})
	err = a.Add(ctx,
		agenthost.SessionStart(model),
		agenthost.TurnStart(1),
		agenthost.UserText(1, "What is the capital of France?"),
		agenthost.ResponseStart(1, 0, model),
		agenthost.TextDelta(1, 0, 0, "Paris."),
		agenthost.ResponseFinish(1, 0, agenthost.StopReasonStop, nil, nil),
		agenthost.TurnEnd(1, agenthost.StopReasonStop))
	if err != nil {
		log.Fatal(err)
	}
	// Close flushes, and nudges the Session: the turn is replayed now
	// rather than at the next poll.
	if err := a.Close(ctx); err != nil {
		log.Fatal(err)
	}
	head, err := chat.Head(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tr, err := chat.WaitTranscript(ctx, head.LastTurnEnd)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range tr.Messages {
		// Messages are pi-ai's, as the host sends them to the provider.
		var msg struct {
			Content []struct{ Text string }
		}
		if err := json.Unmarshal(m.Message, &msg); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("seq %d %s: %s\n", m.Seq, m.Role, msg.Content[0].Text)
	}
	// Output:
	// seq 2 user: What is the capital of France?
	// seq 5 assistant: Paris.
}
