// Package examples holds programs written against turnlog's public
// packages only, in a module of their own: that they build and these tests
// pass proves the packages can be imported from outside the repository.
package examples

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/agenthost"
)

// TestAppendAndRead writes a turn through the public API and reads it
// back: the log's head, the export, and the answer before any replay.
func TestAppendAndRead(t *testing.T) {
	ctx := context.Background()
	st, err := agenthost.OpenStore(ctx, "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := st.Log(agenthost.Location{Namespace: "ns", Session: "s", UID: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	a := l.AppenderAt(0, agenthost.AppenderOptions{})
	if err := a.Add(ctx, agenthost.TurnStart(1), agenthost.UserText(1, "hi"), agenthost.TurnEnd(1, agenthost.StopReasonAborted)); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := l.Head(ctx)
	if err != nil || h.Next != 3 || h.LastTurnEnd != 2 {
		t.Fatalf("Head = %+v, %v; want 3 events, the turn ended at seq 2", h, err)
	}
	var out strings.Builder
	if err := l.Export(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(out.String(), "\n"); lines != 3 || !strings.HasPrefix(out.String(), `{"seq":0,"type":"turn/start","turn":1,`) {
		t.Errorf("export:\n%s", out.String())
	}
	if _, err := l.Transcript(ctx); !errors.Is(err, agenthost.ErrNotReplayed) {
		t.Errorf("Transcript before any replay = %v, want ErrNotReplayed", err)
	}
}

// TestReadPiSession converts a pi-coding-agent session file.
func TestReadPiSession(t *testing.T) {
	file := `{"type":"session","version":3,"id":"s1","cwd":"/w","parentSession":"/w/a.jsonl"}
{"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1767225601000}}
{"type":"message","id":"a1","parentId":"u1","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"hello","textSignature":"ts"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop","timestamp":1767225602000}}
`
	s, err := agenthost.ReadPiSession(strings.NewReader(file), "a.jsonl", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Events) != 5 || s.Leaf != "a1" || s.Annotations()[agenthost.AnnotationPiParentSession] != "/w/a.jsonl" {
		t.Errorf("%d events, leaf %q, annotations %v", len(s.Events), s.Leaf, s.Annotations())
	}
}
