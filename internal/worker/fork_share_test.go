package worker

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// TestForkSharesTheSourcesTranscript forks a long Session, grown turn by
// turn as hosts grow one, at its head, in its middle and early on: each
// child shares its source's final transcript parts instead of copying
// them, starts from the source checkpoint nearest its cut, and stores the
// transcript a whole replay of its log gives. The source then compacts
// (which rewrites its transcript) and is deleted: the children read the
// same transcripts, until the last child goes and nothing is left.
func TestForkSharesTheSourcesTranscript(t *testing.T) {
	ctx := context.Background()
	b, err := store.Open(ctx, "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	logs := sessionlog.New(b)
	target := turnlog.Adapter{}

	lines := bytes.SplitAfter(loggen.Log(40_000, 3), []byte("\n"))
	lines = lines[:len(lines)-1]
	var ends []int64 // the turn/ends' seqs
	for i, l := range lines {
		if bytes.Contains(l, []byte(`"type":"turn/end"`)) {
			ends = append(ends, int64(i))
		}
	}
	src := storeLog(t, logs, "share-src")
	// Grown in pieces of about 40 turns, each followed by the runs.
	from := int64(0)
	for k := 40; ; k += 40 {
		through := ends[min(k, len(ends)-1)]
		appendLines(t, src.Log, lines[from:through+1])
		runBoth(t, src, target, "source")
		from = through + 1
		if k >= len(ends)-1 {
			break
		}
	}
	full, err := derived.LoadTranscript(ctx, src, target)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	var state derived.ReplayState
	if _, err := derived.LoadReplayState(ctx, src, target, &state); err != nil {
		t.Fatal(err)
	}
	for _, p := range state.Parts {
		total += p.Bytes
	}
	t.Logf("source: %d events, %d transcript messages in %d parts, %d bytes", len(lines), len(full.Messages), len(state.Parts), total)

	type child struct {
		log  derived.StoreLog
		cut  int64
		data []byte
	}
	var children []child
	for i, cut := range []int64{ends[len(ends)-1], ends[len(ends)*2/3], ends[len(ends)/2], ends[5]} {
		name := fmt.Sprintf("child %d, cut at seq %d", i, cut)
		dst := storeLog(t, logs, fmt.Sprint("share-child-", i))
		pinned, err := logs.ForkReferences(ctx, src.Log.Location(), cut)
		if err != nil {
			t.Fatal(err)
		}
		seeded, err := derived.SeedFork(ctx, src, dst, cut, target, true, pinned.Names)
		if err != nil {
			t.Fatalf("%s: seed: %v", name, err)
		}
		if _, err := logs.Fork(ctx, src.Log.Location(), dst.Log.Location(), cut, nil); err != nil {
			t.Fatalf("%s: fork: %v", name, err)
		}
		counted := &readCounting{StoreLog: dst, through: cut}
		runBoth(t, counted, target, name)
		t.Logf("%s: seeded %+v; the runs read %d events of the prefix", name, seeded, counted.read)
		if cut > ends[len(ends)/2]-1 {
			if seeded.SharedParts == 0 || seeded.CopiedBytes > total/4 {
				t.Errorf("%s: %d parts shared, %d bytes copied of a %d-byte transcript: want the final parts shared", name, seeded.SharedParts, seeded.CopiedBytes, total)
			}
			if seeded.Transcript < 0 || seeded.Assembly < 0 || counted.read > int(cut)/4 {
				t.Errorf("%s: the child's runs read %d of the prefix's %d events: want it to start near the cut", name, counted.read, cut+1)
			}
		}
		data := bytes.Join(lines[:cut+1], nil)
		checkAgainstWhole(t, dst, data, target, name)
		children = append(children, child{dst, cut, data})
	}

	// The source compacts, which rewrites its transcript, and goes on.
	compaction := fmt.Sprintf(`{"seq":%d,"time":"2026-12-03T10:00:00Z","type":"context/compaction","content":[{"type":"text","text":"summary"}],"firstKeptSeq":%d,"tokensBefore":1000}`+"\n", len(lines), len(lines))
	appendLines(t, src.Log, [][]byte{[]byte(compaction)})
	runBoth(t, src, target, "source, compacted")
	for i, c := range children {
		checkAgainstWhole(t, c.log, c.data, target, fmt.Sprintf("child %d after the source compacted", i))
	}
	if _, err := logs.Delete(ctx, src.Log.Location(), nil); err != nil {
		t.Fatal(err)
	}
	for i, c := range children {
		checkAgainstWhole(t, c.log, c.data, target, fmt.Sprintf("child %d after the source was deleted", i))
		if _, err := logs.Delete(ctx, c.log.Log.Location(), nil); err != nil {
			t.Fatal(err)
		}
	}
	for o, err := range b.List(ctx, "ns/share-") {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("left after every Session was deleted: %s", o.Key)
	}
}
