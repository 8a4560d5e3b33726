package agenthost

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// A log file read with ReadEvents and written with AppendAt exports as the
// same bytes; a fragment appended with AppendFrom continues it; Turns lists
// each turn with its cut and first user words.
func TestImportAppendAndTurns(t *testing.T) {
	sample, err := os.ReadFile("../config/samples/support-chat.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(sample), "\n")
	head, rest := strings.Join(lines[:15], ""), strings.Join(lines[15:], "")

	l := openTestLog(t, memBucket(t))
	events, err := ReadEvents(strings.NewReader(head), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.AppendAt(ctx(t), 0, events); err != nil {
		t.Fatal(err)
	}
	// Importing again where the log is not empty writes nothing.
	if err := l.AppendAt(ctx(t), 0, events); !errors.Is(err, ErrStaleWriter) ||
		!strings.Contains(err.Error(), "its next seq is 15, not 0; nothing from seq 0 on was written") {
		t.Errorf("second import: %v", err)
	}
	// A fragment must start at the log's next seq.
	if _, _, err := l.AppendFrom(ctx(t), strings.NewReader(head)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a fragment starting at seq 0 appended at 15: %v", err)
	}
	first, n, err := l.AppendFrom(ctx(t), strings.NewReader(rest))
	if err != nil || first != 15 || n != 8 {
		t.Fatalf("AppendFrom: first %d, n %d, %v; want 15, 8", first, n, err)
	}
	var out strings.Builder
	if err := l.Export(ctx(t), &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != string(sample) {
		t.Errorf("export differs from the file:\n%s", out.String())
	}

	turns, err := l.Turns(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []Turn{
		{Turn: 1, StartSeq: 1, CutSeq: 4, Reason: StopReasonStop, UserText: "Our nightly deploy failed. What happened?"},
		{Turn: 2, StartSeq: 5, CutSeq: 11, Reason: StopReasonStop, UserText: "How do we make it retry?"},
		{Turn: 3, StartSeq: 12, CutSeq: 16, Reason: StopReasonAborted, UserText: "Write the full runbook for this."},
		{Turn: 4, StartSeq: 17, CutSeq: 22, Reason: StopReasonStop, UserText: "Stop. Just the first step, please."},
	}
	if len(turns) != len(want) {
		t.Fatalf("turns: %+v", turns)
	}
	for i := range want {
		if turns[i] != want[i] {
			t.Errorf("turn %d: %+v, want %+v", i+1, turns[i], want[i])
		}
	}
}

// A turn still streaming has no cut yet; user content given as a string
// is read too.
func TestTurnsOpenTurn(t *testing.T) {
	l := openTestLog(t, memBucket(t))
	raw, err := RawEvent([]byte(`{"type":"user/message","turn":1,"content":"plain  text"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.AppendAt(ctx(t), 0, []Event{TurnStart(1), raw}); err != nil {
		t.Fatal(err)
	}
	turns, err := l.Turns(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 1 || turns[0] != (Turn{Turn: 1, StartSeq: 0, CutSeq: -1, UserText: "plain  text"}) {
		t.Errorf("turns: %+v", turns)
	}
}
