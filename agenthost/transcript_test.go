package agenthost

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/worker"
)

// TestWaitTranscript: a host writes two turns, the first aborted, and waits
// for the transcript while the workers lag; once they replay, it gets the
// messages through the last turn/end, the aborted response left out.
func TestWaitTranscript(t *testing.T) {
	l := openTestLog(t, memBucket(t))
	a := l.Appender(AppenderOptions{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.Add(ctx(t), SessionStart(sonnetTest), TurnStart(1), UserText(1, "one"), ResponseStart(1, 0, sonnetTest),
		TextDelta(1, 0, 0, "partial"), ResponseFinish(1, 0, StopReasonAborted, nil, nil), TurnEnd(1, StopReasonAborted)))
	must(a.Add(ctx(t), TurnStart(2), UserText(2, "two"), ResponseStart(2, 0, sonnetTest),
		TextDelta(2, 0, 0, "answer"), ResponseFinish(2, 0, StopReasonStop, &Envelope{Blocks: []*BlockState{{Type: "text", Signature: "s1"}}}, nil),
		TurnEnd(2, StopReasonStop)))
	must(a.Close(ctx(t)))
	h, err := l.Head(ctx(t))
	must(err)

	short, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	defer cancel()
	_, err = l.WaitTranscript(short, h.LastTurnEnd)
	var nr *NotReplayedError
	if !errors.As(err, &nr) || !errors.Is(err, context.DeadlineExceeded) || nr.Want != h.LastTurnEnd {
		t.Fatalf("WaitTranscript with no worker = %v, want a deadline and not replayed through %d", err, h.LastTurnEnd)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		if _, err := worker.Replay(context.Background(), l.workerLog(), l.target); err != nil {
			t.Error(err)
		}
	}()
	tr, err := l.WaitTranscript(ctx(t), h.LastTurnEnd)
	must(err)
	if tr.ThroughSeq != h.LastTurnEnd {
		t.Errorf("through seq %d, want %d", tr.ThroughSeq, h.LastTurnEnd)
	}
	var roles []string
	for _, m := range tr.Messages {
		roles = append(roles, m.Role+":"+string(m.Replay))
	}
	if got := len(tr.Messages); got != 3 || roles[0] != "user:" || roles[1] != "user:" || roles[2] != "assistant:native" {
		t.Errorf("messages %v, want user, user, native assistant (the aborted response left out)", roles)
	}
	if string(tr.Messages[2].Message) == "" || !strings.Contains(string(tr.Messages[2].Message), `"textSignature":"s1"`) {
		t.Errorf("assistant message %s lost its signature", tr.Messages[2].Message)
	}
}

var sonnetTest = Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}
