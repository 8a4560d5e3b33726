package worker

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
)

// turnBound is the most heap a worker run may hold for one turn, however
// large: the message bound (assembler.MaxMessageBytes), the reader's line
// buffer (turnlog.MaxLineBytes) and room for the rest — a small part of a
// worker pod's 512Mi. Before the bound a 188 MB turn took 1.25 GB to
// assemble and 2 GB to replay.
const turnBound = 80 << 20

// TestHugeTurnStaysBounded: one turn whose response streams 188 MB of
// text (three segments of chunks) is assembled and replayed within
// turnBound: the response is a data error for its message (its content
// left out, a diagnostic), not a worker that runs out of memory, and the
// transcript it leaves is one the reader takes.
func TestHugeTurnStaysBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 188 MB")
	}
	ctx := context.Background()
	dir := t.TempDir()
	loc := sessionlog.Location{Namespace: "team-a", Session: "huge-turn", UID: "u1"}
	root, _ := loc.Root()
	text := strings.Repeat("a turn that never ends ", 3000)[:64<<10]
	next := int64(0)
	const body = 188 << 20
	written := 0
	for seg := 0; written < body; seg++ {
		writeFile(t, filepath.Join(dir, filepath.FromSlash(root), "log", fmt.Sprintf("%020d.jsonl", next)), func(w *bufio.Writer) {
			if next == 0 {
				fmt.Fprintf(w, `{"seq":0,"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude"}}`+"\n")
				fmt.Fprintf(w, `{"seq":1,"type":"turn/start","turn":1}`+"\n")
				fmt.Fprintf(w, `{"seq":2,"type":"user/message","turn":1,"content":"write forever"}`+"\n")
				fmt.Fprintf(w, `{"seq":3,"type":"response/start","turn":1,"response":0}`+"\n")
				next = 4
			}
			for size := 0; size < 60<<20 && written < body; {
				n, _ := fmt.Fprintf(w, `{"seq":%d,"type":"chunk","turn":1,"response":0,"block":0,"delta":{"type":"text","text":"%s"}}`+"\n", next, text)
				next++
				size += n
				written += n
			}
		})
	}
	writeFile(t, filepath.Join(dir, filepath.FromSlash(root), "log", fmt.Sprintf("%020d.jsonl", next)), func(w *bufio.Writer) {
		fmt.Fprintf(w, `{"seq":%d,"type":"response/finish","turn":1,"response":0,"stopReason":"stop"}`+"\n", next)
		fmt.Fprintf(w, `{"seq":%d,"type":"turn/end","turn":1,"reason":"stop"}`+"\n", next+1)
	})
	lastEnd := next + 1

	_, log := openFileLog(t, dir, loc)
	measureHeapWithin(t, turnBound, func() {
		sum, err := Run(ctx, derived.TaskAssemble, log, loggen.Adapter)
		if err != nil {
			t.Fatal(err)
		}
		if sum.ThroughSeq != lastEnd || sum.NewTotal != 1 || sum.New[0].Cause != "MESSAGE_TOO_LARGE" {
			t.Fatalf("assembly: through %d, new %+v; want through %d and one MESSAGE_TOO_LARGE", sum.ThroughSeq, sum.New, lastEnd)
		}
	}, "assemble a 188 MB turn")
	measureHeapWithin(t, turnBound, func() {
		if _, err := Run(ctx, derived.TaskReplay, log, loggen.Adapter); err != nil {
			t.Fatal(err)
		}
		tr, err := derived.LoadTranscript(ctx, log, loggen.Adapter)
		if err != nil {
			t.Fatalf("the stored transcript is not readable: %v", err)
		}
		if n := len(tr.Messages); n != 2 || !strings.Contains(string(tr.Messages[1].Message), "more than the 8388608 a message may have") {
			t.Fatalf("transcript of %d messages; want the user's and the assistant's saying what was left out", n)
		}
	}, "replay a 188 MB turn")
}

// TestManyMessagesStayBounded: a log whose transcript grows by 200,000
// messages in one run — system messages a host wrote between turns, the
// cheapest events to write — is replayed within turnBound, since a run
// stores what it built every passEvents events; before, the run held every
// message until its end (1.66 GB for a million). The stored transcript has
// every message, and the run leaves no part its checkpoint does not list.
func TestManyMessagesStayBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 200,000 messages")
	}
	messages := 200_000
	if os.Getenv("TURNLOG_MEMTEST_FULL") != "" {
		messages = 1_000_000
	}
	ctx := context.Background()
	dir := t.TempDir()
	loc := sessionlog.Location{Namespace: "team-a", Session: "many", UID: "u1"}
	root, _ := loc.Root()
	logDir := filepath.Join(dir, filepath.FromSlash(root), "log")
	writeFile(t, filepath.Join(logDir, fmt.Sprintf("%020d.jsonl", 0)), func(w *bufio.Writer) {
		fmt.Fprintln(w, `{"seq":0,"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude"}}`)
		fmt.Fprintln(w, `{"seq":1,"type":"turn/start","turn":1}`)
		fmt.Fprintln(w, `{"seq":2,"type":"user/message","turn":1,"content":"hello"}`)
		fmt.Fprintln(w, `{"seq":3,"type":"response/start","turn":1,"response":0}`)
		fmt.Fprintln(w, `{"seq":4,"type":"chunk","turn":1,"response":0,"block":0,"delta":{"type":"text","text":"hi"}}`)
		fmt.Fprintln(w, `{"seq":5,"type":"response/finish","turn":1,"response":0,"stopReason":"stop"}`)
		fmt.Fprintln(w, `{"seq":6,"type":"turn/end","turn":1,"reason":"stop"}`)
	})
	writeFile(t, filepath.Join(logDir, fmt.Sprintf("%020d.jsonl", 7)), func(w *bufio.Writer) {
		for i := range messages {
			fmt.Fprintf(w, `{"seq":%d,"type":"system/message","content":"rule %d"}`+"\n", 7+i, i)
		}
	})
	b, log := openFileLog(t, dir, loc)
	if _, err := Run(ctx, derived.TaskAssemble, log, loggen.Adapter); err != nil {
		t.Fatal(err)
	}
	measureHeapWithin(t, turnBound, func() {
		sum, err := Run(ctx, derived.TaskReplay, log, loggen.Adapter)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(6 + messages); sum.ThroughSeq != want || sum.Replay.ContextMessages != int64(messages)+2 {
			t.Fatalf("replay through %d with %d messages in context; want through %d with %d", sum.ThroughSeq, sum.Replay.ContextMessages, want, messages+2)
		}
	}, fmt.Sprintf("replay %d messages", messages))

	tr, err := derived.LoadTranscript(ctx, log, loggen.Adapter)
	if err != nil {
		t.Fatalf("the stored transcript is not readable: %v", err)
	}
	if n := len(tr.Messages); n != messages+2 || !strings.Contains(string(tr.Messages[n-1].Message), fmt.Sprintf("rule %d", messages-1)) {
		t.Fatalf("the stored transcript has %d messages, the last %s; want %d, the last rule %d", n, tr.Messages[n-1].Message, messages+2, messages-1)
	}
	var state derived.ReplayState
	if _, err := derived.LoadReplayState(ctx, log, loggen.Adapter, &state); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, p := range state.Parts {
		listed[p.Name(derived.TranscriptDir(loggen.Adapter))] = true
	}
	for o, err := range b.List(ctx, root+"derived/"+derived.TranscriptDir(loggen.Adapter)+"/") {
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(o.Key, root+"derived/")
		if strings.HasSuffix(name, ".jsonl") && !listed[name] {
			t.Errorf("%s is stored but not listed in the checkpoint's %d parts", name, len(state.Parts))
		}
	}
}

// openFileLog opens the log at loc in a file:// store at dir, closed when
// the test ends.
func openFileLog(t testing.TB, dir string, loc sessionlog.Location) (store.Bucket, derived.StoreLog) {
	t.Helper()
	b, err := store.Open(context.Background(), "file://"+dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	lg, err := sessionlog.New(b).Log(loc)
	if err != nil {
		t.Fatal(err)
	}
	return b, derived.StoreLog{Log: lg}
}
