package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// readCounting is a log that counts the events its readers take at or
// before a seq.
type readCounting struct {
	derived.StoreLog
	through int64
	read    int
}

func (c *readCounting) Events(ctx context.Context, from int64) turnlog.Events {
	return func(yield func(turnlog.Event, error) bool) {
		for e, err := range c.StoreLog.Events(ctx, from) {
			if err == nil && e.Seq <= c.through {
				c.read++
			}
			if !yield(e, err) {
				return
			}
		}
	}
}

// TestForkChildStartsFromItsSourcesDerivedData forks random logs by
// reference, with the source's derived data at the cut (seeded: the
// child's runs read no event of the prefix) and past it (not seeded), and
// continues the child: either way its stored transcript and assembly are
// those of a whole replay of the child's log, before and after it goes on.
func TestForkChildStartsFromItsSourcesDerivedData(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 11))
	targets := []turnlog.Adapter{{}, {API: "openai-responses", Provider: "openai", Model: "gpt-5"}, {ReleaseLine: turnlog.ReleaseLine073}}
	b, err := store.Open(ctx, "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	logs := sessionlog.New(b)
	seeded := 0
	for i := range 30 {
		g := &splitGen{r: r}
		data := g.log(2 + r.IntN(5))
		childData := g.fork(t, data)
		cut := g.base - 1
		target := targets[i%len(targets)]
		atCut := i%2 == 0 // the source's derived data reaches exactly the cut
		name := fmt.Sprintf("log %d (cut %d, source derived at the cut: %v)", i, cut, atCut)

		src := storeLog(t, logs, fmt.Sprint("src-", i))
		prefix, rest := splitAt(data, cut)
		write(t, src, 0, prefix)
		if !atCut {
			write(t, src, cut+1, rest)
		}
		runBoth(t, src, target, name)
		dst := storeLog(t, logs, fmt.Sprint("child-", i))
		pinned, err := logs.ForkReferences(ctx, src.Log.Location(), cut)
		if err != nil {
			t.Fatalf("%s: plan: %v", name, err)
		}
		got, err := derived.SeedFork(ctx, src, dst, cut, target, true, pinned.Names)
		if err != nil {
			t.Fatalf("%s: seed: %v", name, err)
		}
		if _, err := logs.Fork(ctx, src.Log.Location(), dst.Log.Location(), cut, nil); err != nil {
			t.Fatalf("%s: fork: %v", name, err)
		}
		if atCut {
			// The source goes on after the fork; the child is not moved.
			write(t, src, cut+1, rest)
			runBoth(t, src, target, name)
			if got.Assembly != cut+1 || got.Transcript != cut+1 {
				t.Fatalf("%s: seeded %+v, want both at seq %d", name, got, cut+1)
			}
			seeded++
		} else if got.Assembly > cut+1 || got.Transcript > cut+1 {
			t.Fatalf("%s: seeded %+v, past the cut", name, got)
		}
		child := &readCounting{StoreLog: dst, through: cut}
		runBoth(t, child, target, name)
		if got.Transcript == cut+1 && got.Assembly == cut+1 && child.read > 0 {
			t.Fatalf("%s: the seeded child's runs read %d events of the prefix", name, child.read)
		}
		_, childRest := splitAt(childData, cut)
		write(t, dst, cut+1, childRest)
		runBoth(t, child, target, name)
		if got.Transcript == cut+1 && got.Assembly == cut+1 && child.read > 0 {
			t.Fatalf("%s: the seeded child's runs read %d events of the prefix", name, child.read)
		}
		checkAgainstWhole(t, dst, childData, target, name)
	}
	t.Logf("%d forks, %d of them seeded from their source's derived data", 30, seeded)
}

func storeLog(t *testing.T, logs *sessionlog.Store, name string) derived.StoreLog {
	t.Helper()
	lg, err := logs.Log(sessionlog.Location{Namespace: "ns", Session: name, UID: "u-" + name})
	if err != nil {
		t.Fatal(err)
	}
	return derived.StoreLog{Log: lg}
}

// splitAt splits a log's lines after seq cut.
func splitAt(data []byte, cut int64) (before, after []byte) {
	lines := bytes.SplitAfter(data, []byte("\n"))
	n := int(cut + 1)
	return bytes.Join(lines[:n], nil), bytes.Join(lines[n:], nil)
}

// write appends data's lines, which start at seq from, as one segment:
// the appender gives them their seqs again.
func write(t *testing.T, lg derived.StoreLog, from int64, data []byte) {
	t.Helper()
	if len(data) == 0 {
		return
	}
	var events [][]byte
	for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		seq := fmt.Appendf(nil, `{"seq":%d,`, from+int64(i))
		rest, ok := bytes.CutPrefix(line, seq)
		if !ok {
			t.Fatalf("line %q does not start with seq %d", line, from+int64(i))
		}
		events = append(events, append([]byte("{"), rest...))
	}
	first, err := lg.Log.NewAppender("").Append(context.Background(), events...)
	if err != nil || first != from {
		t.Fatalf("append at %d: first %d, %v", from, first, err)
	}
}

func runBoth(t *testing.T, lg derived.Log, target turnlog.Adapter, name string) {
	t.Helper()
	if _, err := Assemble(context.Background(), lg); err != nil {
		t.Fatalf("%s: assemble: %v", name, err)
	}
	if _, err := Replay(context.Background(), lg, target); err != nil {
		t.Fatalf("%s: replay: %v", name, err)
	}
}

// checkAgainstWhole compares what the runs stored for lg with a whole
// replay and a fresh assembly of data.
func checkAgainstWhole(t *testing.T, lg derived.StoreLog, data []byte, target turnlog.Adapter, name string) {
	t.Helper()
	ctx := context.Background()
	stored, err := derived.LoadTranscript(ctx, lg, target)
	if err != nil {
		t.Fatalf("%s: read the child's transcript: %v", name, err)
	}
	through := int64(-1) // the last turn/end: what the runs replay through
	for _, l := range bytes.SplitAfter(data, []byte("\n")) {
		if bytes.Contains(l, []byte(`"type":"turn/end"`)) {
			through = wantSeq(l)
		}
	}
	whole, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(data)).All(), replay.Options{Target: target, Through: through, Reread: replay.RereadBytes(data)})
	if err != nil {
		t.Fatalf("%s: whole replay: %v", name, err)
	}
	got, _ := json.Marshal(struct {
		M []replay.Message
		C replay.Counts
	}{stored.Messages, stored.Counts})
	want, _ := json.Marshal(struct {
		M []replay.Message
		C replay.Counts
	}{whole.Messages, whole.Counts})
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: the child's stored transcript differs from a whole replay:\n got %s\nwant %s", name, got, want)
	}
	fresh := newMemLog(t, nil)
	fresh.append(t, data)
	wantSum, err := Assemble(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	var gotState derived.AssemblyState
	raw, err := lg.GetDerived(ctx, derived.AssemblyCheckpointName, 0)
	if err != nil || json.Unmarshal(raw, &gotState) != nil {
		t.Fatalf("%s: read the child's assembly checkpoint: %v", name, err)
	}
	gotSum := gotState.Summary
	gotSum.New, gotSum.NewTotal, wantSum.New, wantSum.NewTotal = nil, 0, nil, 0
	g, _ := json.Marshal(gotSum)
	w, _ := json.Marshal(wantSum)
	if !bytes.Equal(g, w) {
		t.Fatalf("%s: the child's assembly summary differs from a fresh assembly:\n got %s\nwant %s", name, g, w)
	}
}
