package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// sharedFixtureDir is the fork tree whose transcripts share parts, which
// every reader of transcripts, in every language, reads to the same
// messages (testdata/stores/shared-transcripts/README.md).
const sharedFixtureDir = "../../testdata/stores/shared-transcripts"

var updateSharedFixture = flag.Bool("update-shared-fixture", false, "write testdata/stores/shared-transcripts again from the workers' code")

// fixtureTarget is the target the fixture's transcripts are replayed for.
var fixtureTarget = turnlog.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}

// TestSharedTranscriptFixture writes the fixture's store as the manager and
// the workers do (a source, a fork of it and a fork of that fork, each
// replayed, the children sharing their ancestors' final parts) and holds
// it to the committed one byte for byte: the layout the pi package reads
// (test/transcript.test.ts) is the one Go writes. Each Session's stored
// transcript is read to expected/ and is a whole replay of its log.
func TestSharedTranscriptFixture(t *testing.T) {
	dir := t.TempDir()
	if *updateSharedFixture {
		abs, err := filepath.Abs(sharedFixtureDir)
		if err != nil {
			t.Fatal(err)
		}
		dir = abs
		if err := os.RemoveAll(filepath.Join(dir, "store")); err != nil {
			t.Fatal(err)
		}
	}
	logs := writeSharedFixture(t, filepath.Join(dir, "store"), filepath.Join(dir, "expected"))
	if *updateSharedFixture {
		return
	}
	if diff := diffTrees(t, sharedFixtureDir, dir); diff != "" {
		t.Errorf("the workers no longer write the committed fixture (go test ./internal/worker -run TestSharedTranscriptFixture -update-shared-fixture writes it again, for the pi package's reader to be checked against):\n%s", diff)
	}
	// Every part a child lists with a holder is in the holder's root.
	for _, s := range []string{"mid", "leaf"} {
		var state derived.ReplayState
		if _, err := derived.LoadReplayState(context.Background(), fixtureLog(t, logs, s), fixtureTarget, &state); err != nil {
			t.Fatal(err)
		}
		shared := 0
		for _, p := range state.Parts {
			if p.Session != "" {
				shared++
			}
		}
		if shared == 0 {
			t.Errorf("%s shares no transcript part: the fixture shows nothing", s)
		}
	}
}

// fixtureSessions are the fixture's Sessions, by name, with their uids.
var fixtureSessions = map[string]string{"src": "u1", "mid": "u2", "leaf": "u3"}

func fixtureLog(t *testing.T, logs *sessionlog.Store, session string) derived.StoreLog {
	t.Helper()
	lg, err := logs.Log(sessionlog.Location{Namespace: "ns", Session: session, UID: fixtureSessions[session]})
	if err != nil {
		t.Fatal(err)
	}
	return derived.StoreLog{Log: lg}
}

// writeSharedFixture writes the fork tree into storeDir and each
// Session's transcript, as its readers return it, into expectedDir.
func writeSharedFixture(t *testing.T, storeDir, expectedDir string) *sessionlog.Store {
	t.Helper()
	ctx := context.Background()
	for _, d := range []string{storeDir, expectedDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := store.Open(ctx, "file://"+storeDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	logs := sessionlog.New(b)

	// A big tool result fills a part of its own past half of
	// derived.MaxPartBytes: sealed, so final, so shared by a fork.
	big := func(who string) string {
		return strings.Repeat(who+" read a long file. ", (derived.MaxPartBytes/2+4096)/len(who+" read a long file. ")+1)
	}
	// Each turn is appended and replayed on its own, as a host's are: a
	// segment and a part (or more, merged) a turn.
	turns := func(lg derived.StoreLog, name string, texts ...string) {
		for _, text := range texts {
			writeTurns(t, lg, []string{text})
			runBoth(t, lg, fixtureTarget, name)
		}
	}
	src := fixtureLog(t, logs, "src")
	turns(src, "src", "hello", big("source"), "after the long file", "src turn 4")

	fork := func(from derived.StoreLog, to string, cut int64) derived.StoreLog {
		dst := fixtureLog(t, logs, to)
		refs, err := logs.ForkReferences(ctx, from.Log.Location(), cut)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := derived.SeedFork(ctx, from, dst, cut, fixtureTarget, true, refs.Names); err != nil {
			t.Fatalf("seed %s: %v", to, err)
		}
		if _, err := logs.Fork(ctx, from.Log.Location(), dst.Log.Location(), cut, nil); err != nil {
			t.Fatalf("fork %s: %v", to, err)
		}
		runBoth(t, dst, fixtureTarget, to)
		return dst
	}
	// mid: src through its third turn, then two turns of its own, one
	// long; leaf: mid through its long turn, then a turn of its own.
	mid := fork(src, "mid", turnEndSeq(3))
	turns(mid, "mid", big("mid"), "mid turn 5")
	leaf := fork(mid, "leaf", turnEndSeq(4))
	turns(leaf, "leaf", "leaf turn 5")

	for name, lg := range map[string]derived.StoreLog{"src": src, "mid": mid, "leaf": leaf} {
		tr, err := derived.LoadTranscript(ctx, lg, fixtureTarget)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var out bytes.Buffer
		for _, m := range tr.Messages {
			line, err := json.Marshal(struct {
				Seq     int64           `json:"seq"`
				Role    string          `json:"role"`
				Message json.RawMessage `json:"message"`
			}{m.Seq, m.Role, m.Message})
			if err != nil {
				t.Fatal(err)
			}
			out.Write(line)
			out.WriteByte('\n')
		}
		if err := os.WriteFile(filepath.Join(expectedDir, name+".jsonl"), out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		checkAgainstWhole(t, lg, exportOf(t, lg), fixtureTarget, name)
	}
	return logs
}

// writeTurns appends a turn per text to lg, after a session/start if the
// log is empty: the user's text and an assistant's answer.
func writeTurns(t *testing.T, lg derived.StoreLog, texts []string) {
	t.Helper()
	ctx := context.Background()
	head, err := lg.Log.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var events [][]byte
	for i, text := range texts {
		events = append(events, turnEvents(head.Next == 0 && i == 0, head.Turns+int64(i)+1, text)...)
	}
	if _, err := lg.Log.NewAppender("fixture").Append(ctx, events...); err != nil {
		t.Fatal(err)
	}
}

// turnEndSeq is the seq of turn n's turn/end in a log writeTurns wrote:
// a session/start, then four events a turn.
func turnEndSeq(n int64) int64 { return 4 * n }

// exportOf is lg's whole log, as `turnlog export` prints it.
func exportOf(t *testing.T, lg derived.StoreLog) []byte {
	t.Helper()
	var out bytes.Buffer
	for e, err := range lg.Log.Events(context.Background(), 0, math.MaxInt64) {
		if err != nil {
			t.Fatal(err)
		}
		out.Write(e.Raw)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// diffTrees lists the files that differ between the directories want and
// got, or "" if none does.
func diffTrees(t *testing.T, want, got string) string {
	t.Helper()
	files := func(root string) map[string][]byte {
		out := map[string][]byte{}
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() == "README.md" {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			out[rel], err = os.ReadFile(path)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	w, g := files(want), files(got)
	var diff []string
	for name, data := range w {
		switch other, ok := g[name]; {
		case !ok:
			diff = append(diff, "not written: "+name)
		case !bytes.Equal(data, other):
			diff = append(diff, fmt.Sprintf("written otherwise: %s (%d bytes, committed %d)", name, len(other), len(data)))
		}
	}
	for name := range g {
		if _, ok := w[name]; !ok {
			diff = append(diff, "not committed: "+name)
		}
	}
	return strings.Join(diff, "\n")
}
