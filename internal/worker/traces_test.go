package worker

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/telemetry"
	"github.com/turnlog/turnlog/internal/turnspans"
)

// exportTo makes exp the process's export for the test.
func exportTo(t *testing.T) (*tracetest.InMemoryExporter, *telemetry.Telemetry) {
	exp := tracetest.NewInMemoryExporter()
	tel := telemetry.StartWith(exp, "turnlog-worker", false)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return exp, tel
}

// turnSpans are the exported spans of the sessions' turns, by name.
func turnSpans(t *testing.T, exp *tracetest.InMemoryExporter, tel *telemetry.Telemetry) []tracetest.SpanStub {
	t.Helper()
	if err := tel.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.InstrumentationScope.Name == telemetry.Scope+"/sessions" {
			out = append(out, s)
		}
	}
	return out
}

var traced = AssembleOptions{Session: turnspans.Identity{UID: "uid-1", Namespace: "team", Session: "chat"}}

func TestEachTurnIsExportedOnce(t *testing.T) {
	exp, tel := exportTo(t)
	data := testLog(t, "tool-result-next-turn.jsonl")
	log := newMemLog(t, lines(data, 0, 8)) // turn 1
	ctx := context.Background()
	if _, err := AssembleWith(ctx, log, traced); err != nil {
		t.Fatal(err)
	}
	if got := len(turnSpans(t, exp, tel)); got != 3 {
		t.Fatalf("after turn 1: %d spans exported, want 3 (invoke_agent, chat, execute_tool)", got)
	}
	log.append(t, lines(data, 8, 22)) // turns 2 and 3
	if _, err := AssembleWith(ctx, log, traced); err != nil {
		t.Fatal(err)
	}
	if got := len(turnSpans(t, exp, tel)); got != 3+4+2 {
		t.Fatalf("after turns 2 and 3: %d spans exported, want 9", got)
	}
	// A lost checkpoint makes the next run read every turn again; the
	// spans are not exported again.
	if err := log.DeleteDerived(ctx, derived.AssemblyCheckpointName); err != nil {
		t.Fatal(err)
	}
	if _, err := AssembleWith(ctx, log, traced); err != nil {
		t.Fatal(err)
	}
	if got := len(turnSpans(t, exp, tel)); got != 9 {
		t.Errorf("after a redo: %d spans exported, want still 9", got)
	}
	ids := map[string]bool{}
	for _, s := range turnSpans(t, exp, tel) {
		id := s.SpanContext.SpanID().String()
		if ids[id] {
			t.Errorf("span %s exported twice", id)
		}
		ids[id] = true
	}
}

func TestNoTurnIsExportedBeforeItsCheckpoint(t *testing.T) {
	exp, tel := exportTo(t)
	log := failingCheckpoint{newMemLog(t, testLog(t, "tool-result-next-turn.jsonl"))}
	if _, err := AssembleWith(context.Background(), log, traced); err == nil {
		t.Fatal("the run stored no checkpoint and did not fail")
	}
	if got := turnSpans(t, exp, tel); len(got) != 0 {
		t.Errorf("a run that stored no checkpoint exported %d spans", len(got))
	}
}

func TestNoSpansWithoutExport(t *testing.T) {
	log := newMemLog(t, testLog(t, "tool-result-next-turn.jsonl"))
	if _, err := AssembleWith(context.Background(), log, traced); err != nil {
		t.Fatal(err)
	}
	if _, ok := log.objects[derived.TracesMarkName]; ok {
		t.Error("a process that exports no traces stored a traces mark")
	}
}

// failingCheckpoint is a log whose assembly checkpoint cannot be stored.
type failingCheckpoint struct{ *memLog }

func (l failingCheckpoint) PutDerived(ctx context.Context, name string, data []byte) error {
	if name == derived.AssemblyCheckpointName {
		return errors.New("the store refused the write")
	}
	return l.memLog.PutDerived(ctx, name, data)
}
