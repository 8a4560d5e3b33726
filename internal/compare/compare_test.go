package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/worker"
)

// storedLog is a Session's log in an object store as agenthost.Log reads
// it: its events through sessionlog, its transcript as the workers stored
// it for the log's own adapter.
type storedLog struct{ log *sessionlog.Log }

func (l storedLog) Events(ctx context.Context, from int64) iter.Seq2[turnlog.Event, error] {
	return l.log.Events(ctx, from, math.MaxInt64)
}

func (l storedLog) TranscriptWindow(ctx context.Context, q derived.TranscriptQuery) (derived.TranscriptWindow, error) {
	return derived.LoadTranscriptWindow(ctx, derived.StoreLog{Log: l.log}, turnlog.Adapter{}, q)
}

func (l storedLog) AssemblyAt(ctx context.Context, seq int64) (derived.AssemblyState, bool, error) {
	return derived.LoadAssemblyAt(ctx, derived.StoreLog{Log: l.log}, seq)
}

// sessions are Sessions' logs in one in-memory store, written, forked and
// replayed as the hosts, the fork controller and the workers do.
type sessions struct {
	t    *testing.T
	logs *sessionlog.Store
}

func newSessions(t *testing.T) *sessions {
	b, err := store.Open(t.Context(), "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &sessions{t: t, logs: sessionlog.New(b)}
}

func location(name string) sessionlog.Location {
	return sessionlog.Location{Namespace: "team-a", Session: name, UID: name + "-uid"}
}

// branch is Session name's log as a side of a comparison.
func (s *sessions) branch(name string) Branch {
	s.t.Helper()
	l, err := s.logs.Log(location(name))
	if err != nil {
		s.t.Fatal(err)
	}
	return Branch{Name: "team-a/" + name, Log: storedLog{l}}
}

// seqField is the seq a line of `turnlog export` starts with.
var seqField = regexp.MustCompile(`^\{"seq":\d+,`)

// write appends JSON Lines (with seqs, as exported, or without) to
// Session name's log, as a host does: the log assigns the seqs.
func (s *sessions) write(name string, lines []byte) {
	s.t.Helper()
	var events [][]byte
	for line := range bytes.Lines(lines) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			events = append(events, seqField.ReplaceAll(line, []byte("{")))
		}
	}
	if len(events) == 0 {
		return
	}
	if _, err := s.branch(name).Log.(storedLog).log.NewAppender("").Append(s.t.Context(), events...); err != nil {
		s.t.Fatalf("write %s: %v", name, err)
	}
}

// fork makes child the copy of source's events 0..cut, as the fork
// controller does.
func (s *sessions) fork(source, child string, cut int64) {
	s.t.Helper()
	if err := s.logs.CopyPrefix(s.t.Context(), location(source), location(child), cut); err != nil {
		s.t.Fatal(err)
	}
}

// replay stores the assembly states and transcripts of Sessions, as the
// workers do.
func (s *sessions) replay(names ...string) {
	s.t.Helper()
	for _, name := range names {
		l := derived.StoreLog{Log: s.branch(name).Log.(storedLog).log}
		if _, err := worker.Assemble(s.t.Context(), l); err != nil {
			s.t.Fatalf("assemble %s: %v", name, err)
		}
		if _, err := worker.Replay(s.t.Context(), l, turnlog.Adapter{}); err != nil {
			s.t.Fatalf("replay %s: %v", name, err)
		}
	}
}

func sample(t *testing.T) []byte {
	data, err := os.ReadFile("../../config/samples/support-chat.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// describe is a side as a reader sees it, one line per turn and entry.
func describe(s Side) []string {
	var out []string
	for _, t := range s.Turns {
		out = append(out, fmt.Sprintf("turn %d %d-%d %s replayed=%v", t.Turn, t.StartSeq, t.EndSeq, t.Reason, t.Replayed))
		for _, e := range t.Entries {
			marks := []string{e.Kind, e.Role, e.Replay}
			if e.Degraded != nil {
				marks = append(marks, "degraded:"+e.Degraded.Cause)
			}
			if len(e.Refused) > 0 {
				marks = append(marks, fmt.Sprintf("refused:%d", len(e.Refused)))
			}
			if e.Synthetic {
				marks = append(marks, "synthetic")
			}
			if e.Kind == KindFrozen {
				marks = append(marks, "stop="+e.StopReason)
			}
			marks = slices.DeleteFunc(marks, func(m string) bool { return m == "" })
			out = append(out, fmt.Sprintf("  %d %s %q", e.Seq, strings.Join(marks, " "), e.Text))
		}
	}
	return out
}

func compareLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\ngot\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The child of a fork of the sample at its aborted turn (cut 16) goes on
// with two turns of its own: one whose answer carries another library's
// replay state, one stopped while it streamed. Its first turn/start is
// the source's own line, so the logs still agree at seq 17.
const childTurns = `{"type":"turn/start","turn":4,"time":"2026-12-01T10:00:17.000Z"}
{"type":"user/message","turn":4,"time":"2026-12-01T11:00:18.000Z","content":[{"type":"text","text":"Only the first step, briefly."}]}
{"type":"response/start","turn":4,"response":0,"adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}}
{"type":"chunk","turn":4,"response":0,"block":0,"delta":{"type":"text","text":"Check that the registry answers."}}
{"type":"response/finish","turn":4,"response":0,"stopReason":"stop","replayState":{"kind":"other-library","version":1,"response":{}}}
{"type":"turn/end","turn":4,"reason":"stop"}
{"type":"turn/start","turn":5}
{"type":"user/message","turn":5,"content":"And the second step?"}
{"type":"response/start","turn":5,"response":0}
{"type":"chunk","turn":5,"response":0,"block":0,"delta":{"type":"text","text":"Then re-run the pipe"}}
{"type":"turn/end","turn":5,"reason":"aborted"}
`

func TestParentAndChild(t *testing.T) {
	s := newSessions(t)
	s.write("chat", sample(t))
	s.fork("chat", "chat-retry", 16)
	s.write("chat-retry", []byte(childTurns))
	s.replay("chat", "chat-retry")

	c, err := Compare(t.Context(), s.branch("chat"), s.branch("chat-retry"))
	if err != nil {
		t.Fatal(err)
	}
	// Turns 1-3: 2 messages each in turns 1 and 2, the user's alone in the
	// aborted turn 3. Seq 17 is the same in both, yet turn 4 is not shared.
	want := Shared{CutSeq: 16, Turns: 3, FirstTurn: 1, LastTurn: 3, LastTurnEndSeq: 16, LastReason: "aborted", Messages: 5, SameThroughSeq: 17}
	if c.Shared != want || c.Identical {
		t.Errorf("shared %+v (identical %v), want %+v", c.Shared, c.Identical, want)
	}
	if c.A.Name != "team-a/chat" || c.A.HeadSeq != 22 || c.A.ThroughSeq != 22 || c.B.Name != "team-a/chat-retry" || c.B.HeadSeq != 27 || c.B.ThroughSeq != 27 {
		t.Errorf("sides %s head %d through %d, %s head %d through %d", c.A.Name, c.A.HeadSeq, c.A.ThroughSeq, c.B.Name, c.B.HeadSeq, c.B.ThroughSeq)
	}
	compareLines(t, "the source after the cut", describe(c.A), []string{
		"turn 4 17-22 stop replayed=true",
		`  18 message user "Stop. Just the first step, please."`,
		`  21 message assistant native "First, check whether the registry is reachable from the cluster."`,
	})
	compareLines(t, "the child after the cut", describe(c.B), []string{
		"turn 4 17-22 stop replayed=true",
		`  18 message user "Only the first step, briefly."`,
		`  21 message assistant foreign degraded:kind "Check that the registry answers."`,
		"turn 5 23-27 aborted replayed=true",
		`  24 message user "And the second step?"`,
		`  26 frozen stop= "Then re-run the pipe"`,
	})

	// The other way round, the sides change places.
	r, err := Compare(t.Context(), s.branch("chat-retry"), s.branch("chat"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Shared != c.Shared || r.A.Name != c.B.Name || !slices.Equal(describe(r.A), describe(c.B)) || !slices.Equal(describe(r.B), describe(c.A)) {
		t.Errorf("swapped arguments: A %s %q, B %s %q", r.A.Name, describe(r.A), r.B.Name, describe(r.B))
	}
}

// The comparison is what a page gets: JSON with the names of the fields
// it reads.
func TestComparisonAsJSON(t *testing.T) {
	s := newSessions(t)
	s.write("chat", sample(t))
	s.fork("chat", "chat-retry", 16)
	s.write("chat-retry", []byte(childTurns))
	s.replay("chat", "chat-retry")
	c, err := Compare(t.Context(), s.branch("chat"), s.branch("chat-retry"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Shared struct {
			CutSeq, Turns, Messages int64
		}
		B struct {
			Name  string
			Turns []struct {
				Turn    int64
				Entries []struct {
					Kind, Role, Text string
					Message          json.RawMessage
					Degraded         *struct{ Cause string }
				}
			}
		}
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	entries := got.B.Turns[0].Entries
	if got.Shared.CutSeq != 16 || got.Shared.Turns != 3 || got.B.Name != "team-a/chat-retry" || len(entries) != 2 ||
		entries[1].Degraded == nil || entries[1].Degraded.Cause != "kind" || !bytes.Contains(entries[1].Message, []byte(`"role":"assistant"`)) {
		t.Errorf("JSON %s", data)
	}
	if frozen := got.B.Turns[1].Entries[1]; frozen.Kind != "frozen" || frozen.Text != "Then re-run the pipe" || frozen.Message != nil {
		t.Errorf("frozen text as JSON: %+v", frozen)
	}
}

// turnEnds are the seqs of a log's turn/ends, by turn.
func turnEnds(t *testing.T, lines []byte) map[int64]int64 {
	t.Helper()
	out := map[int64]int64{}
	for e, err := range turnlog.NewReaderWith(bytes.NewReader(lines), nil).All() {
		if err != nil {
			break
		}
		if e.Type == turnlog.TypeTurnEnd {
			out[e.Turn] = e.Seq
		}
	}
	return out
}

// Two children of one long generated log, cut after turn 2 and after turn
// 4, each with a turn of its own: they share turns 1-2, and the second's
// side holds the source's turns 3-4 before its own.
func TestSiblingsCutAtDifferentTurns(t *testing.T) {
	s := newSessions(t)
	source := loggen.Log(600, 11)
	ends := turnEnds(t, source)
	if len(ends) < 5 {
		t.Fatalf("the generated log has %d turns, want 5 or more", len(ends))
	}
	s.write("long", source)
	s.fork("long", "long-2", ends[2])
	s.fork("long", "long-4", ends[4])
	s.write("long-2", []byte("{\"type\":\"turn/start\",\"turn\":3}\n{\"type\":\"user/message\",\"turn\":3,\"content\":\"Try it the other way.\"}\n{\"type\":\"turn/end\",\"turn\":3,\"reason\":\"stop\"}\n"))
	s.write("long-4", []byte("{\"type\":\"turn/start\",\"turn\":5}\n{\"type\":\"user/message\",\"turn\":5,\"content\":\"Go on from here.\"}\n{\"type\":\"turn/end\",\"turn\":5,\"reason\":\"stop\"}\n"))
	s.replay("long", "long-2", "long-4")

	c, err := Compare(t.Context(), s.branch("long-2"), s.branch("long-4"))
	if err != nil {
		t.Fatal(err)
	}
	// The messages the source's transcript holds through the cut: what
	// the prefix counted from the log.
	tr, err := derived.LoadTranscript(t.Context(), derived.StoreLog{Log: s.branch("long").Log.(storedLog).log}, turnlog.Adapter{})
	if err != nil {
		t.Fatal(err)
	}
	var sharedMessages, turns34 int64
	var want4 []string
	for _, m := range tr.Messages {
		switch {
		case m.Seq <= ends[2]:
			sharedMessages++
		case m.Seq <= ends[4]:
			turns34++
			want4 = append(want4, fmt.Sprintf("%d %s", m.Seq, m.Role))
		}
	}
	want := Shared{CutSeq: ends[2], Turns: 2, FirstTurn: 1, LastTurn: 2, LastTurnEndSeq: ends[2], LastReason: "stop",
		Messages: sharedMessages, SameThroughSeq: ends[2]}
	if c.Shared != want {
		t.Errorf("shared %+v, want %+v", c.Shared, want)
	}
	compareLines(t, "the child cut after turn 2", describe(c.A), []string{
		fmt.Sprintf("turn 3 %d-%d stop replayed=true", ends[2]+1, ends[2]+3),
		fmt.Sprintf(`  %d message user "Try it the other way."`, ends[2]+2),
	})
	if n := len(c.B.Turns); n != 3 || c.B.Turns[0].Turn != 3 || c.B.Turns[1].Turn != 4 || c.B.Turns[2].Turn != 5 {
		t.Fatalf("the child cut after turn 4 has turns %q", describe(c.B))
	}
	var got4 []string
	for _, turn := range c.B.Turns[:2] {
		for _, e := range turn.Entries {
			got4 = append(got4, fmt.Sprintf("%d %s", e.Seq, e.Role))
		}
	}
	compareLines(t, "the source's turns 3-4 in the child cut after turn 4", got4, want4)
	if e := c.B.Turns[2].Entries; len(e) != 1 || e[0].Text != "Go on from here." {
		t.Errorf("the child's own turn: %q", describe(c.B))
	}
}

// A child cut at its source's last turn, nothing added: the same log.
func TestIdenticalSessions(t *testing.T) {
	s := newSessions(t)
	s.write("chat", sample(t))
	s.fork("chat", "chat-copy", 22)
	c, err := Compare(t.Context(), s.branch("chat"), s.branch("chat-copy"))
	if err != nil {
		t.Fatal(err)
	}
	want := Shared{CutSeq: 22, Turns: 4, FirstTurn: 1, LastTurn: 4, LastTurnEndSeq: 22, LastReason: "stop", Messages: 7, SameThroughSeq: 22}
	if !c.Identical || c.Shared != want || len(c.A.Turns)+len(c.B.Turns) != 0 {
		t.Errorf("identical %v, shared %+v (want %+v), turns %q %q", c.Identical, c.Shared, want, describe(c.A), describe(c.B))
	}
}

// A child that holds its source's prefix and no more: the source's side
// has the turns after it, the child's none. Neither is replayed: a side
// with nothing after the prefix needs no transcript.
func TestChildWithNothingAfterTheCut(t *testing.T) {
	s := newSessions(t)
	s.write("chat", sample(t))
	s.fork("chat", "chat-retry", 16)
	s.replay("chat")
	c, err := Compare(t.Context(), s.branch("chat"), s.branch("chat-retry"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Identical || c.Shared.CutSeq != 16 || len(c.A.Turns) != 1 || len(c.B.Turns) != 0 || c.B.HeadSeq != 16 || c.B.ThroughSeq != -1 {
		t.Errorf("shared %+v, A %q, B head %d through %d %q", c.Shared, describe(c.A), c.B.HeadSeq, c.B.ThroughSeq, describe(c.B))
	}
}

func TestNoSharedPrefix(t *testing.T) {
	s := newSessions(t)
	s.write("chat", sample(t))
	s.write("generated", loggen.Log(100, 1))
	// The sample's session/start and turn/start, then another first
	// question: they share no whole turn.
	lines := bytes.SplitAfter(sample(t), []byte("\n"))
	s.write("other", slices.Concat(lines[0], lines[1], []byte(`{"type":"user/message","turn":1,"content":"Something else."}`+"\n"+`{"type":"turn/end","turn":1,"reason":"stop"}`+"\n")))
	// "empty" and "nothing" were never written: their logs hold no event.
	for _, tc := range []struct {
		a, b     string
		differAt int64
		why      string
	}{
		{"chat", "generated", 0, "their logs differ from seq 0 on"},
		{"chat", "other", 2, "their logs differ from seq 2 on"},
		{"chat", "empty", 0, "the log of team-a/empty holds no event"},
		{"empty", "nothing", 0, "neither log holds an event"},
	} {
		_, err := Compare(t.Context(), s.branch(tc.a), s.branch(tc.b))
		var ns *NoSharedPrefixError
		if !errors.As(err, &ns) || !errors.Is(err, ErrNoSharedPrefix) || ns.DifferAt != tc.differAt {
			t.Errorf("%s and %s: %v, want no shared prefix, differing at seq %d", tc.a, tc.b, err, tc.differAt)
			continue
		}
		if want := fmt.Sprintf("team-a/%s and team-a/%s share no prefix of whole turns: %s", tc.a, tc.b, tc.why); err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
	}
}

// A side with turns after the prefix and no stored transcript yet is an
// error naming it; a store that cannot be read is one too.
func TestErrors(t *testing.T) {
	s := newSessions(t)
	s.write("chat", sample(t))
	s.fork("chat", "chat-retry", 16)
	s.write("chat-retry", []byte(childTurns))
	s.replay("chat")
	_, err := Compare(t.Context(), s.branch("chat"), s.branch("chat-retry"))
	if !errors.Is(err, derived.ErrNotReplayed) || !strings.HasPrefix(err.Error(), "team-a/chat-retry has no stored transcript yet: ") {
		t.Errorf("a child not replayed: %v", err)
	}

	broken := s.branch("chat")
	broken.Log = failingLog{broken.Log, errors.New("access denied")}
	_, err = Compare(t.Context(), s.branch("chat-retry"), broken)
	if err == nil || err.Error() != "read the log of team-a/chat: access denied" {
		t.Errorf("an unreadable log: %v", err)
	}
}

// failingLog is a log whose store refuses every read.
type failingLog struct {
	Log
	err error
}

func (f failingLog) Events(context.Context, int64) iter.Seq2[turnlog.Event, error] {
	return func(yield func(turnlog.Event, error) bool) { yield(turnlog.Event{}, f.err) }
}

// refusedLog is three turns of claude-opus-5 whose third answer reports,
// as pi-ai 1.6 records Anthropic's input_transformations, that the
// provider dropped the thinking of the second answer (seq 7).
func refusedLog() []byte {
	var b strings.Builder
	b.WriteString(`{"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-opus-5","releaseLine":"1"}}` + "\n")
	for turn := 1; turn <= 3; turn++ {
		report := ""
		if turn == 3 {
			report = `,"diagnostics":[{"type":"anthropic_input_transformations","timestamp":1,"details":{"transformations":[{"type":"thinking_dropped","path":"messages.5.content.0","reason":"prefix_binding_mismatch"}]}}]`
		}
		fmt.Fprintf(&b, `{"type":"turn/start","turn":%d}`+"\n", turn)
		fmt.Fprintf(&b, `{"type":"user/message","turn":%d,"content":"question %d"}`+"\n", turn, turn)
		fmt.Fprintf(&b, `{"type":"assistant/message","turn":%d,"response":0,"message":{"content":[{"type":"thinking","thinking":"think %d","thinkingSignature":"sig%d"},{"type":"text","text":"answer %d"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-opus-5","stopReason":"stop","providerThinkingLevel":"high"%s}}`+"\n",
			turn, turn, turn, turn, report)
		fmt.Fprintf(&b, `{"type":"turn/end","turn":%d,"reason":"stop"}`+"\n", turn)
	}
	return []byte(b.String())
}

// A message after the cut whose thinking the provider refused carries
// replay's words for it; the sibling's side, which never sent it, does
// not.
func TestRefusedBlocksAreMarked(t *testing.T) {
	s := newSessions(t)
	s.write("opus", refusedLog())
	s.fork("opus", "opus-retry", 4)
	s.write("opus-retry", []byte(`{"type":"turn/start","turn":2}`+"\n"+`{"type":"user/message","turn":2,"content":"another question"}`+"\n"+
		`{"type":"assistant/message","turn":2,"response":0,"message":{"content":[{"type":"thinking","thinking":"hmm","thinkingSignature":"sigx"},{"type":"text","text":"another answer"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-opus-5","stopReason":"stop"}}`+"\n"+
		`{"type":"turn/end","turn":2,"reason":"stop"}`+"\n"))
	s.replay("opus", "opus-retry")
	c, err := Compare(t.Context(), s.branch("opus"), s.branch("opus-retry"))
	if err != nil {
		t.Fatal(err)
	}
	compareLines(t, "the source after the cut", describe(c.A), []string{
		"turn 2 5-8 stop replayed=true",
		`  6 message user "question 2"`,
		`  7 message assistant native refused:1 "answer 2"`,
		"turn 3 9-12 stop replayed=true",
		`  10 message user "question 3"`,
		`  11 message assistant native "answer 3"`,
	})
	if r := c.A.Turns[0].Entries[1].Refused; len(r) != 1 || !strings.Contains(r[0], "prefix_binding_mismatch") {
		t.Errorf("refused %q, want replay's words with the provider's reason", r)
	}
	compareLines(t, "the child after the cut", describe(c.B), []string{
		"turn 2 5-8 stop replayed=true",
		`  6 message user "another question"`,
		`  7 message assistant native "another answer"`,
	})
}
