package pirecord

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/test/internal/pihost"
)

// TestStartReadsTheHeadOfALongLog: pi is started again on a session whose
// log has grown to 10^5 events in thousands of segments, turns recorded as
// the package records them. The package continues the log from its last
// segment and its first, not from all of them: it reads at most 3 segments
// while pi starts, takes a prompt and quits; the log validates, and its
// transcript is what pi resumes the session with.
func TestStartReadsTheHeadOfALongLog(t *testing.T) {
	prov := newProvider(t)
	ref := sessionRef{fileURL: "file://" + t.TempDir(), loc: agenthost.Location{Namespace: "default", Session: "chat-long", UID: "9b2e-long"}}
	e := newEnv(t, prov, ref.storeURL(), nil, ref.loc.Namespace, ref.loc.Session, ref.loc.UID)
	pi := e.Start()
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "The launch is on Tuesday."}}, Stop: "end_turn"})
	pi.Prompt("When is the launch?")
	file, _ := pi.Call(map[string]any{"type": "get_state"})["sessionFile"].(string)
	pi.Quit()

	h := historyOf(t, file, ref.export(t))
	for h.seq < 100_000 {
		h.addTurn()
	}
	h.write(t, file, ref)

	gets := filepath.Join(t.TempDir(), "gets")
	e.Vars = append(e.Vars, "TURNLOG_DEBUG_GETS="+gets)
	pi = e.Start("--session", file)
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "Sunny."}}, Stop: "end_turn"})
	pi.Prompt("And the weather?")
	pi.Quit()

	read := segmentGets(t, gets)
	segments, _ := filepath.Glob(filepath.Join(strings.TrimPrefix(ref.fileURL, "file://"), ref.loc.Namespace, ref.loc.Session, ref.loc.UID, "log", "*.jsonl"))
	if len(read) > 3 || len(segments) < 1000 {
		t.Fatalf("pi's start read %d of the log's %d segments, want at most 3 of at least 1,000: %v", len(read), len(segments), read[:min(len(read), 5)])
	}
	log := ref.export(t)
	events := validate(t, log)
	if !slices.ContainsFunc(events[h.seq:], func(ev turnlog.Event) bool {
		return ev.Type == turnlog.TypeAssistantMessage && strings.Contains(string(ev.Raw), `"Sunny."`)
	}) {
		t.Fatalf("the log does not go on with the new turn after seq %d", h.seq-1)
	}
	checkStreams(t, events)
	pc := resumeOf(t, e, file)
	if d := sameAsPi(t, ref.stored(t, target(pc)).Messages, pc, target(pc)); d != "" {
		t.Fatalf("the stored transcript differs from pi's context: %s", d)
	}
	t.Logf("%d events in %d segments; pi's start read %v", len(events), len(segments), read)
}

// segmentGets reads what TURNLOG_DEBUG_GETS wrote: the log segments read.
func segmentGets(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var keys []string
	for key := range strings.FieldsSeq(string(data)) {
		if strings.Contains(key, "/log/") {
			keys = append(keys, key)
		}
	}
	return keys
}

// BenchmarkPackageStart: the pi package's start on a log of 10^3 and of
// 10^5 events in a file:// store — Recorder.open, then offPath and record
// of pi's path, as on session_start — against reading the whole log, which
// open did before. testdata/start.ts times both in one node process and
// says how many segments each read; ns/op is that whole process.
//
//	go test ./test/pirecord -run '^$' -bench BenchmarkPackageStart -benchtime 1x
func BenchmarkPackageStart(b *testing.B) {
	node, _, _ := pihost.Paths(b)
	jiti := filepath.Join(pihost.PiDir(), "node_modules", "jiti", "lib", "jiti-cli.mjs")
	for _, n := range []int64{1_000, 100_000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			ref := sessionRef{fileURL: "file://" + b.TempDir(), loc: agenthost.Location{Namespace: "default", Session: "bench", UID: "b0b0-bench"}}
			file := filepath.Join(b.TempDir(), "session.jsonl")
			h := newHistory()
			for h.seq < n {
				h.addTurn()
			}
			h.write(b, file, ref)
			var got struct {
				Segments       int
				Start, ReadAll struct {
					Ms   float64
					Gets int
				}
			}
			for b.Loop() {
				cmd := exec.Command(node, jiti, "testdata/start.ts", ref.fileURL, ref.loc.Namespace+"/"+ref.loc.Session+"/"+ref.loc.UID, file, "5")
				cmd.Stderr = os.Stderr
				out, err := cmd.Output()
				if err != nil {
					b.Fatalf("start.ts: %v", err)
				}
				if err := json.Unmarshal(out, &got); err != nil {
					b.Fatalf("start.ts: %v: %s", err, out)
				}
			}
			b.ReportMetric(float64(got.Segments), "segments")
			b.ReportMetric(got.Start.Ms, "start-ms")
			b.ReportMetric(float64(got.Start.Gets), "start-gets")
			b.ReportMetric(got.ReadAll.Ms, "readall-ms")
			b.ReportMetric(float64(got.ReadAll.Gets), "readall-gets")
		})
	}
}

// ---------------------------------------------------------------------------
// A long history
// ---------------------------------------------------------------------------

// history is turns added to a pi session file and to its Session's log as
// pi and the package write them: a user and an assistant message entry;
// turn/start, user/message, a response streamed in chunks, pi's message and
// response/finish in one segment, and turn/end in another, as the package
// flushes at a response/finish and at a turn/end.
type history struct {
	leaf      string // the entry the next turn follows; "" for none
	seq, turn int64  // the log's next seq, its last turn
	at        time.Time
	entries   [][]byte // session file lines
	first     int64    // the seq segments starts at
	segments  [][][]byte
}

// chunksPerResponse is how many text deltas each added response streams,
// as in agenthost's BenchmarkAppender.
const chunksPerResponse = 63

// newHistory starts a pi session file (its header) and its log (the
// session/start) from nothing.
func newHistory() *history {
	at := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	header := map[string]any{"type": "session", "version": 3, "id": "0b5e55ed-long", "timestamp": stamp(at), "cwd": "/"}
	h := &history{at: at}
	h.entries = append(h.entries, mustJSON(header))
	h.segments = append(h.segments, [][]byte{h.event(map[string]any{"type": "session/start", "time": stamp(at),
		"adapter": map[string]any{"kind": "pi-ai", "api": "anthropic-messages", "provider": "fake", "model": "model-a", "releaseLine": "1"}, "piSession": header})})
	return h
}

// historyOf goes on from a pi session file and its Session's log, which
// must end with a turn.
func historyOf(t *testing.T, file string, log []byte) *history {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	var leaf struct{ ID string }
	if err := json.Unmarshal(lines[len(lines)-1], &leaf); err != nil {
		t.Fatal(err)
	}
	events := validate(t, log)
	last := events[len(events)-1]
	var end struct{ Turn int64 }
	if err := json.Unmarshal(last.Raw, &end); err != nil || last.Type != "turn/end" {
		t.Fatalf("the log does not end with a turn: %s", last.Raw)
	}
	return &history{leaf: leaf.ID, seq: last.Seq + 1, first: last.Seq + 1, turn: end.Turn, at: time.Now().UTC()}
}

// addTurn adds a turn: a question and an answer streamed in chunks.
func (h *history) addTurn() {
	h.turn++
	h.at = h.at.Add(time.Second)
	user := h.entry(map[string]any{"role": "user", "content": []any{text(fmt.Sprintf("Question %d?", h.turn))}, "timestamp": h.at.UnixMilli()})
	var answer strings.Builder
	segment := [][]byte{
		h.event(map[string]any{"type": "turn/start", "turn": h.turn, "time": stamp(h.at)}),
		h.event(map[string]any{"type": "user/message", "turn": h.turn, "time": stamp(h.at), "content": []any{text(fmt.Sprintf("Question %d?", h.turn))}, "piEntry": user}),
		h.event(map[string]any{"type": "response/start", "turn": h.turn, "time": stamp(h.at), "response": 0,
			"adapter": map[string]any{"kind": "pi-ai", "api": "anthropic-messages", "provider": "fake", "model": "model-a"}}),
	}
	for i := range chunksPerResponse {
		piece := fmt.Sprintf("word %d of answer %d; ", i, h.turn)
		answer.WriteString(piece)
		segment = append(segment, h.event(map[string]any{"type": "chunk", "turn": h.turn, "time": stamp(h.at), "response": 0, "block": 0,
			"delta": map[string]any{"type": "text", "text": piece}}))
	}
	usage := map[string]any{"input": 101, "output": 21, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 122,
		"cost": map[string]any{"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0, "totalFromProvider": false}, "cacheWrite1h": 0}
	message := map[string]any{"role": "assistant", "content": []any{text(answer.String())}, "api": "anthropic-messages", "provider": "fake",
		"model": "model-a", "usage": usage, "stopReason": "stop", "timestamp": h.at.UnixMilli(), "responseId": fmt.Sprintf("msg_h%d", h.turn)}
	assistant := h.entry(message)
	segment = append(segment,
		h.event(map[string]any{"type": "assistant/message", "turn": h.turn, "time": stamp(h.at), "response": 0, "message": message, "piEntry": assistant}),
		h.event(map[string]any{"type": "response/finish", "turn": h.turn, "time": stamp(h.at), "response": 0, "stopReason": "stop", "usage": usage}))
	h.segments = append(h.segments, segment, [][]byte{h.event(map[string]any{"type": "turn/end", "turn": h.turn, "time": stamp(h.at), "reason": "stop"})})
}

// entry adds a message entry after the leaf and returns its piEntry.
func (h *history) entry(message map[string]any) map[string]any {
	id := fmt.Sprintf("f%07x", len(h.entries))
	var parent any
	if h.leaf != "" {
		parent = h.leaf
	}
	h.entries = append(h.entries, mustJSON(map[string]any{"type": "message", "id": id, "parentId": parent, "timestamp": stamp(h.at), "message": message}))
	h.leaf = id
	return map[string]any{"id": id, "parentId": parent}
}

// event numbers an event and returns its line.
func (h *history) event(ev map[string]any) []byte {
	data := mustJSON(ev)
	line := append(fmt.Appendf(nil, `{"seq":%d,`, h.seq), data[1:]...)
	h.seq++
	return line
}

// write appends the entries to the session file and the segments to the
// Session's log.
func (h *history) write(tb testing.TB, file string, ref sessionRef) {
	tb.Helper()
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = f.Write(append(bytes.Join(h.entries, []byte("\n")), '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	b, err := ref.bucket(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer b.Close()
	root, err := sessionlog.Location{Prefix: ref.loc.Prefix, Namespace: ref.loc.Namespace, Session: ref.loc.Session, UID: ref.loc.UID}.Root()
	if err != nil {
		tb.Fatal(err)
	}
	// Segments are independent objects: written side by side, as each one
	// waits for its fsync.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	first := h.first
	for _, seg := range h.segments {
		key := fmt.Sprintf("%slog/%020d.jsonl", root, first)
		body := append(bytes.Join(seg, []byte("\n")), '\n')
		g.Go(func() error { return b.PutIfAbsent(gctx, key, body, nil) })
		first += int64(len(seg))
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
}

func text(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}
