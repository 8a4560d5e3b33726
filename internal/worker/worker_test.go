package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// memLog is a Log in memory that counts the events runs read.
type memLog struct {
	events  []turnlog.Event
	objects map[string][]byte
	read    int
	// onPut, if set, sees every PutDerived.
	onPut func(name string, data []byte)
}

func newMemLog(t testing.TB, data []byte) *memLog {
	t.Helper()
	l := &memLog{objects: map[string][]byte{}}
	l.append(t, data)
	return l
}

func (l *memLog) append(t testing.TB, data []byte) {
	t.Helper()
	r := turnlog.NewReaderWith(bytes.NewReader(data), turnlog.NewValidatorAt(int64(len(l.events))))
	for e, err := range r.All() {
		if err != nil {
			t.Fatal(err)
		}
		l.events = append(l.events, e)
	}
}

func (l *memLog) Head(context.Context) (int64, error) { return int64(len(l.events)) - 1, nil }

func (l *memLog) Events(_ context.Context, from int64) turnlog.Events {
	return func(yield func(turnlog.Event, error) bool) {
		for _, e := range l.events[min(from, int64(len(l.events))):] {
			l.read++
			if !yield(e, nil) {
				return
			}
		}
	}
}

func (l *memLog) GetDerived(_ context.Context, name string, limit int64) ([]byte, error) {
	data, ok := l.objects[name]
	if !ok {
		return nil, derived.ErrNotFound
	}
	if limit > 0 && int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: %s: %d bytes, over the limit of %d", derived.ErrUnusable, name, len(data), limit)
	}
	return data, nil
}

func (l *memLog) DeleteDerived(_ context.Context, name string) error {
	delete(l.objects, name)
	return nil
}

func (l *memLog) PutDerived(_ context.Context, name string, data []byte) error {
	if l.onPut != nil {
		l.onPut(name, data)
	}
	l.objects[name] = data
	return nil
}

// Beside: a memLog is alone; forks' shared parts are tested on a store.
func (l *memLog) Beside(session, uid string) (derived.Log, error) {
	return nil, fmt.Errorf("no Session %s (uid %s) beside an in-memory log", session, uid)
}

func testLog(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "logs", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func lines(data []byte, from, to int) []byte {
	all := bytes.SplitAfter(data, []byte("\n"))
	return bytes.Join(all[from:to], nil)
}

func TestAssembleReadsOnlyWhatIsNew(t *testing.T) {
	ctx := context.Background()
	data := testLog(t, "aborted-turn.jsonl")
	log := newMemLog(t, lines(data, 0, 19)) // turn 3 still streaming

	sum, err := Assemble(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	want := derived.Summary{Task: derived.TaskAssemble, ThroughSeq: 15, ScannedThrough: 18, Turns: 3, LastTurnEnd: &derived.TurnEnd{Seq: 15, Turn: 2, Reason: "aborted"}}
	if !equalJSON(sum, want) {
		t.Fatalf("first run: got %+v, want %+v", sum, want)
	}
	if log.read != 19 {
		t.Fatalf("first run read %d events, want 19", log.read)
	}

	log.read = 0
	if again, err := Assemble(ctx, log); err != nil || !equalJSON(again, want) || log.read != 0 {
		t.Fatalf("a run with no new events: got %+v, %v after reading %d events", again, err, log.read)
	}

	log.append(t, lines(data, 19, 22))
	sum, err = Assemble(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ThroughSeq != 21 || sum.Turns != 3 || sum.LastTurnEnd.Seq != 21 {
		t.Fatalf("after the turn ended: got %+v", sum)
	}
	// The open turn (seq 16..18) is read again with the new events, nothing before it.
	if log.read != 6 {
		t.Fatalf("second run read %d events, want the 6 of the turn that ended", log.read)
	}
	if _, ok := log.objects["assembly/00000000000000000016.json"]; !ok {
		t.Fatalf("no assembly segment for the turn starting at seq 16; have %v", keys(log.objects))
	}
}

func TestAssembleReportsDiscardedEnvelopes(t *testing.T) {
	log := newMemLog(t, testLog(t, "misaligned-envelope.jsonl"))
	sum, err := Assemble(context.Background(), log)
	if err != nil {
		t.Fatal(err)
	}
	if sum.EnvelopesDiscarded != 1 || sum.NewTotal != 1 || len(sum.New) != 1 || sum.New[0].Seq != 6 || sum.New[0].Cause != "ENVELOPE_MISALIGNED" {
		t.Fatalf("got %+v", sum)
	}
}

// Replaying a log turn by turn, across runs, gives the transcript and
// counts that replaying it whole does.
func TestReplayInRunsMatchesAWholeReplay(t *testing.T) {
	ctx := context.Background()
	data := loggen.Log(400, 3)
	all := bytes.SplitAfter(data, []byte("\n"))
	log := newMemLog(t, nil)
	var runs []derived.Summary
	for from := 0; from < len(all); {
		to := min(from+97, len(all)) // cuts through turns
		log.append(t, bytes.Join(all[from:to], nil))
		sum, err := Replay(ctx, log, turnlog.Adapter{})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, sum)
		from = to
	}
	whole, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(data)).All(), replay.Options{Through: replay.Head})
	if err != nil {
		t.Fatal(err)
	}
	last := runs[len(runs)-1]
	if last.ThroughSeq != whole.ThroughSeq {
		t.Fatalf("replayed through %d, want %d", last.ThroughSeq, whole.ThroughSeq)
	}
	if got, want := last.Replay.Native, int64(whole.Counts.Native); got != want || got == 0 {
		t.Fatalf("native: got %d, want %d", got, want)
	}
	if want := (turnlog.Adapter{Kind: loggen.Adapter.Kind, API: loggen.Adapter.API, Provider: loggen.Adapter.Provider,
		Model: loggen.Adapter.Model, ReleaseLine: turnlog.DefaultReleaseLine}); last.Replay.Target != want {
		t.Fatalf("target: got %+v, want the session/start adapter on the default release line %+v", last.Replay.Target, want)
	}

	messages := storedTranscript(t, log, turnlog.Adapter{})
	if !equalJSON(messages, whole.Messages) {
		t.Fatalf("the transcript from %d runs differs from a whole replay (%d vs %d messages)", len(runs), len(messages), len(whole.Messages))
	}
}

// storedTranscript is the transcript the replay runs for target stored, as
// hosts read it.
func storedTranscript(t *testing.T, log *memLog, target turnlog.Adapter) []replay.Message {
	t.Helper()
	tr, err := derived.LoadTranscript(context.Background(), log, target)
	if err != nil {
		t.Fatal(err)
	}
	return tr.Messages
}

// A turn that ends with toolUse is answered by the next turn, which the next
// run replays: the stored transcript pairs the real result, as a replay of
// the whole log does, and gives the call a synthetic result only while the
// answer has not arrived.
func TestReplayKeepsToolCallsOpenAcrossRuns(t *testing.T) {
	ctx := context.Background()
	data := []byte(`{"seq":0,"type":"turn/start","turn":1}
{"seq":1,"type":"user/message","turn":1,"content":"list the files"}
{"seq":2,"type":"assistant/message","turn":1,"response":0,"message":{"content":[{"type":"toolCall","id":"c1","name":"ls","arguments":{}}],"stopReason":"toolUse"}}
{"seq":3,"type":"turn/end","turn":1,"reason":"toolUse"}
{"seq":4,"type":"turn/start","turn":2}
{"seq":5,"type":"tool/result","turn":2,"toolCallId":"c1","toolName":"ls","content":[{"type":"text","text":"a b"}],"isError":false}
{"seq":6,"type":"assistant/message","turn":2,"response":0,"message":{"content":[{"type":"text","text":"a and b"}],"stopReason":"stop"}}
{"seq":7,"type":"turn/end","turn":2,"reason":"stop"}
`)
	log := newMemLog(t, lines(data, 0, 4))
	for _, step := range []struct {
		to   int
		want string
	}{
		{4, "1:user 2:assistant 2:toolResult/synthetic"},
		{8, "1:user 2:assistant 5:toolResult 6:assistant"},
	} {
		log.append(t, lines(data, len(log.events), step.to))
		if _, err := Replay(ctx, log, turnlog.Adapter{}); err != nil {
			t.Fatal(err)
		}
		got := storedTranscript(t, log, turnlog.Adapter{})
		var parts []string
		for _, m := range got {
			parts = append(parts, fmt.Sprintf("%d:%s", m.Seq, m.Role)+map[bool]string{true: "/synthetic"}[m.Synthetic])
		}
		if strings.Join(parts, " ") != step.want {
			t.Errorf("through seq %d: stored transcript %s, want %s", step.to-1, strings.Join(parts, " "), step.want)
		}
		whole, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(lines(data, 0, step.to))).All(), replay.Options{Through: replay.Head})
		if err != nil {
			t.Fatal(err)
		}
		if !equalJSON(got, whole.Messages) {
			t.Errorf("through seq %d: stored transcript differs from a whole replay", step.to-1)
		}
	}
}

func TestReplayReportsEachDegradedMessageOnce(t *testing.T) {
	ctx := context.Background()
	data := testLog(t, "legacy-flat-state.jsonl")
	log := newMemLog(t, lines(data, 0, 5))
	first, err := Replay(ctx, log, turnlog.Adapter{})
	if err != nil {
		t.Fatal(err)
	}
	if first.NewTotal != 1 || first.New[0].Seq != 3 || first.New[0].Cause != "version" || first.Replay.Degraded != 1 {
		t.Fatalf("first run: got %+v", first)
	}
	log.append(t, lines(data, 5, 12))
	second, err := Replay(ctx, log, turnlog.Adapter{})
	if err != nil {
		t.Fatal(err)
	}
	if second.NewTotal != 0 || second.Replay.Degraded != 1 || second.Replay.Native != 1 || !slices.Equal(second.Replay.DegradedSeqs["version"], []int64{3}) {
		t.Fatalf("second run: got %+v", second)
	}

	other := turnlog.Adapter{API: "openai-responses", Provider: "openai", Model: "gpt-5"}
	foreign, err := Replay(ctx, log, other)
	if err != nil {
		t.Fatal(err)
	}
	if foreign.Replay.Native != 0 || foreign.Replay.Foreign != 2 || foreign.ThroughSeq != 11 || foreign.NewTotal != 1 {
		t.Fatalf("another target starts its own transcript: got %+v", foreign)
	}
}

func TestSummaryFitsAResultMessage(t *testing.T) {
	sum := derived.Summary{Task: derived.TaskReplay, Replay: &derived.ReplayCounts{DegradedSeqs: map[string][]int64{}}}
	for i := range 100 {
		sum.Note(derived.Diagnostic{Seq: int64(1e15 + i), Cause: "malformed", Message: strings.Repeat("é", 500)})
	}
	for _, cause := range []string{"kind", "version", "malformed", "shape"} {
		for i := range derived.MaxSeqsPerCause {
			sum.Replay.DegradedSeqs[cause] = append(sum.Replay.DegradedSeqs[cause], int64(1e15+i))
		}
	}
	sum.Replay.Refused, sum.Replay.RefusedSeqs = map[string]int64{}, map[string][]int64{}
	for _, reason := range append(slices.Clone(replay.RefusalReasons), replay.CauseOtherReason) {
		sum.Replay.Refused[string(reason)] = 1e15
		for i := range derived.MaxSeqsPerCause {
			sum.Replay.RefusedSeqs[string(reason)] = append(sum.Replay.RefusedSeqs[string(reason)], int64(1e15+i))
		}
	}
	sum.Replay.RefusalsUnmapped = 1e15
	data := summaryMessage(sum)
	if len(data) > maxSummaryMessage || sum.NewTotal != 100 || len(sum.New) != derived.MaxNewDiagnostics {
		t.Fatalf("summary of %d bytes, %d new of %d", len(data), len(sum.New), sum.NewTotal)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func keys(m map[string][]byte) []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
}

// A log that is only a session/start has its head at seq 0; a second run
// must see that nothing changed.
func TestAssembleRemembersAHeadAtSeqZero(t *testing.T) {
	ctx := context.Background()
	log := newMemLog(t, lines(testLog(t, "aborted-turn.jsonl"), 0, 1))
	if _, err := Assemble(ctx, log); err != nil {
		t.Fatal(err)
	}
	log.read = 0
	sum, err := Assemble(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	if log.read != 0 || sum.ScannedThrough != 0 || sum.ThroughSeq != -1 {
		t.Fatalf("second run read %d events and says %+v", log.read, sum)
	}
}

// shortLog is a log whose reads end before the head it reports: objects
// missing behind a head that is there, as a fork's log being copied once
// looked.
type shortLog struct {
	*memLog
	reads int64
}

func (l *shortLog) Events(ctx context.Context, from int64) turnlog.Events {
	return (&memLog{events: l.events[:l.reads]}).Events(ctx, from)
}

// TestAssembleRefusesShortRead: an assembly that could not read through
// the head fails, rather than storing a summary that passes for the whole
// log and would never be redone.
func TestAssembleRefusesShortRead(t *testing.T) {
	data := testLog(t, "aborted-turn.jsonl")
	l := &shortLog{memLog: newMemLog(t, data), reads: 5}
	_, err := Assemble(context.Background(), l)
	if err == nil || !strings.Contains(err.Error(), "it ended at seq 4, before seq 21, its head when this run began") {
		t.Fatalf("Assemble of a log that reads short = %v, want an error saying where it ended", err)
	}
	if _, ok := l.objects[derived.AssemblyCheckpointName]; ok {
		t.Fatal("a short read left an assembly checkpoint")
	}
}

// The context events that need messages the stored transcript no longer
// holds — an edit of a message an earlier edit removed, an edit that gives
// an assistant message back a tool call whose result an earlier edit left
// out, a compaction keeping from before the previous one's kept messages —
// read the log again, in a run after the one that stored the transcript
// they change: after each run the stored transcript is a whole replay's.
func TestReplayRunsReadTheLogAgainForWhatTheContextLost(t *testing.T) {
	ctx := context.Background()
	const sessionStart = `{"seq":0,"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude"}}` + "\n"
	turn := func(seq, n int, question, answer string) string {
		return fmt.Sprintf(`{"seq":%d,"type":"turn/start","turn":%d}
{"seq":%d,"type":"user/message","turn":%d,"content":[{"type":"text","text":%q}]}
{"seq":%d,"type":"assistant/message","turn":%d,"response":0,"message":{"content":[{"type":"text","text":%q}],"stopReason":"stop"}}
{"seq":%d,"type":"turn/end","turn":%d,"reason":"stop"}
`, seq, n, seq+1, n, question, seq+2, n, answer, seq+3, n)
	}
	for _, tc := range []struct {
		name string
		// runs are the log's pieces, each replayed by a run; want is the
		// stored transcript's texts after the last.
		runs []string
		want string
	}{{
		name: "an edit of a message an earlier edit removed",
		runs: []string{
			sessionStart + turn(1, 1, "my password is hunter2", "no") +
				`{"seq":5,"type":"context/edit","targetSeq":2,"replacement":null}` + "\n" + turn(6, 2, "and now?", "still no"),
			`{"seq":10,"type":"context/edit","targetSeq":2,"replacement":{"content":"my password is [redacted]"}}` + "\n" + turn(11, 3, "thanks", "welcome"),
		},
		want: "my password is [redacted]|no|and now?|still no|thanks|welcome",
	}, {
		name: "an edit that gives a tool call back",
		runs: []string{
			sessionStart + `{"seq":1,"type":"turn/start","turn":1}
{"seq":2,"type":"user/message","turn":1,"content":"read the config"}
{"seq":3,"type":"assistant/message","turn":1,"response":0,"message":{"content":[{"type":"toolCall","id":"c1","name":"cat","arguments":{}}],"stopReason":"toolUse"}}
{"seq":4,"type":"tool/result","turn":1,"toolCallId":"c1","toolName":"cat","content":[{"type":"text","text":"port: 8080"}],"isError":false}
{"seq":5,"type":"assistant/message","turn":1,"response":1,"message":{"content":[{"type":"text","text":"8080"}],"stopReason":"stop"}}
{"seq":6,"type":"turn/end","turn":1,"reason":"stop"}
{"seq":7,"type":"context/edit","targetSeq":3,"replacement":{"content":"reading the config"}}
` + turn(8, 2, "which port?", "8080"),
			`{"seq":12,"type":"context/edit","targetSeq":3,"replacement":{"content":[{"type":"text","text":"reading"},{"type":"toolCall","id":"c1","name":"cat","arguments":{}}]}}` + "\n" +
				turn(13, 3, "sure?", "yes"),
		},
		want: "read the config|reading|port: 8080|8080|which port?|8080|sure?|yes",
	}, {
		name: "a compaction that keeps from before the previous one's kept messages",
		runs: []string{
			sessionStart + turn(1, 1, "one", "1") + turn(5, 2, "two", "2") + turn(9, 3, "three", "3") +
				`{"seq":13,"type":"context/compaction","content":"first summary","firstKeptSeq":10}` + "\n" + turn(14, 4, "four", "4"),
			`{"seq":18,"type":"context/compaction","content":"second summary","firstKeptSeq":6}` + "\n" + turn(19, 5, "five", "5"),
		},
		want: "second summary|two|2|three|3|four|4|five|5",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			log := newMemLog(t, nil)
			var data []byte
			for _, piece := range tc.runs {
				log.append(t, []byte(piece))
				data = append(data, piece...)
				if _, err := Replay(ctx, log, turnlog.Adapter{}); err != nil {
					t.Fatal(err)
				}
				whole, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(data)).All(), replay.Options{Through: replay.Head, Reread: replay.RereadBytes(data)})
				if err != nil {
					t.Fatal(err)
				}
				if got := storedTranscript(t, log, turnlog.Adapter{}); !equalJSON(got, whole.Messages) {
					t.Fatalf("after the run through seq %d, the stored transcript differs from a whole replay:\n%s\n%s", len(log.events)-1, texts(got), texts(whole.Messages))
				}
			}
			if got := texts(storedTranscript(t, log, turnlog.Adapter{})); got != tc.want {
				t.Errorf("stored transcript %s, want %s", got, tc.want)
			}
		})
	}
}

// texts is the text of each message, joined by |.
func texts(msgs []replay.Message) string {
	var out []string
	for _, m := range msgs {
		var v struct{ Content json.RawMessage }
		_ = json.Unmarshal(m.Message, &v)
		var s string
		if json.Unmarshal(v.Content, &s) != nil {
			var blocks []struct{ Text string }
			_ = json.Unmarshal(v.Content, &blocks)
			var parts []string
			for _, b := range blocks {
				if b.Text != "" {
					parts = append(parts, b.Text)
				}
			}
			s = strings.Join(parts, "+")
		}
		out = append(out, s)
	}
	return strings.Join(out, "|")
}

// A checkpoint stored before checkpoints said where the context starts is
// not believed once a context event has changed the transcript: the log is
// replayed again, so an edit after it is applied as pi applies it.
func TestReplayCheckpointWithoutContextIsReplayedAgain(t *testing.T) {
	ctx := context.Background()
	data := []byte(`{"seq":0,"type":"turn/start","turn":1}
{"seq":1,"type":"user/message","turn":1,"content":"secret"}
{"seq":2,"type":"assistant/message","turn":1,"response":0,"message":{"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}}
{"seq":3,"type":"turn/end","turn":1,"reason":"stop"}
{"seq":4,"type":"context/edit","targetSeq":1,"replacement":null}
{"seq":5,"type":"context/edit","targetSeq":1,"replacement":{"content":"[redacted]"}}
`)
	log := newMemLog(t, lines(data, 0, 5))
	if _, err := Replay(ctx, log, turnlog.Adapter{}); err != nil {
		t.Fatal(err)
	}
	name := derived.ReplayCheckpointName(turnlog.Adapter{})
	var checkpoint map[string]json.RawMessage
	if err := json.Unmarshal(log.objects[name], &checkpoint); err != nil {
		t.Fatalf("checkpoint %s: %v", name, err)
	}
	if _, ok := checkpoint["context"]; !ok {
		t.Fatalf("the checkpoint does not record the context: %s", log.objects[name])
	}
	delete(checkpoint, "context")
	log.objects[name], _ = json.Marshal(checkpoint)

	log.append(t, lines(data, 5, 6))
	if _, err := Replay(ctx, log, turnlog.Adapter{}); err != nil {
		t.Fatal(err)
	}
	if got := texts(storedTranscript(t, log, turnlog.Adapter{})); got != "[redacted]|ok" {
		t.Errorf("stored transcript %s, want the message back with the latest edit", got)
	}
}

// refusalLog is a session of claude-opus-5 on anthropic-messages whose
// second answer (seq 7) reports that the provider dropped the first
// answer's thinking (seq 3, block 0); with more, a third turn's answer
// (seq 11) reports it again.
func refusalLog(more bool) []byte {
	answer := func(turn int, diags string) string {
		return fmt.Sprintf(`{"type":"assistant/message","turn":%d,"response":0,"message":{"role":"assistant","content":[{"type":"thinking","thinking":"t%d","thinkingSignature":"sig%d"},{"type":"text","text":"a"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-opus-5","stopReason":"stop","providerThinkingLevel":"high"%s}}`, turn, turn, turn, diags)
	}
	dropped := `,"diagnostics":[{"type":"anthropic_input_transformations","timestamp":1,"details":{"transformations":[{"type":"thinking_dropped","path":"messages.2.content.0","reason":"prefix_binding_mismatch"}]}}]`
	events := []string{`{"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-opus-5","releaseLine":"1"}}`}
	turns := 2
	if more {
		turns = 3
	}
	for turn := 1; turn <= turns; turn++ {
		diags := dropped
		if turn == 1 {
			diags = ""
		}
		events = append(events, fmt.Sprintf(`{"type":"turn/start","turn":%d}`, turn),
			fmt.Sprintf(`{"type":"user/message","turn":%d,"content":[{"type":"text","text":"q"}]}`, turn),
			answer(turn, diags), fmt.Sprintf(`{"type":"turn/end","turn":%d,"reason":"stop"}`, turn))
	}
	var b strings.Builder
	for seq, e := range events {
		fmt.Fprintf(&b, `{"seq":%d,%s`+"\n", seq, strings.TrimPrefix(e, "{"))
	}
	return []byte(b.String())
}

func TestReplayCountsEachRefusedBlockOnce(t *testing.T) {
	ctx := context.Background()
	log := newMemLog(t, refusalLog(false))
	first, err := Replay(ctx, log, turnlog.Adapter{})
	if err != nil {
		t.Fatal(err)
	}
	c := first.Replay
	if first.NewTotal != 1 || first.New[0].Code != replay.CodeReplayStateRefused || first.New[0].Seq != 3 || first.New[0].Cause != "prefix_binding_mismatch" ||
		c.Refused["prefix_binding_mismatch"] != 1 || !slices.Equal(c.RefusedSeqs["prefix_binding_mismatch"], []int64{3}) || c.Degraded != 0 || c.Native != 2 {
		t.Fatalf("first run: got %+v, counts %+v", first, c)
	}
	log.append(t, lines(refusalLog(true), 9, 13))
	second, err := Replay(ctx, log, turnlog.Adapter{})
	if err != nil {
		t.Fatal(err)
	}
	if c := second.Replay; second.NewTotal != 0 || c.Refused["prefix_binding_mismatch"] != 1 || second.ThroughSeq != 12 {
		t.Fatalf("a refusal reported again in the next run: got %+v, counts %+v", second, c)
	}
}
