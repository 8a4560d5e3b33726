package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/derived"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/heappeak"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
)

// heapBound is the most heap the manager's read paths may use over the
// test's own: less than the 2M-event segment below (56 MB), so a path
// that held that segment, or a tenth of the log, fails; far less than the
// manager's 256Mi limit.
const heapBound = 40 << 20

// TestReadersStayBounded runs the manager's read paths — the head for
// status, the checkpoints (real and forged), a fork's prefix copy through
// the middle of a huge segment, and an export of the whole log — over a
// log of large turns ending in a segment of 2 million events, and checks
// that the heap stays under heapBound. The log is written to a file://
// bucket as it is generated, never held in memory.
//
// The log is 64 MB of turns plus the 56 MB segment; TURNLOG_MEMTEST_FULL=1
// makes it 1 GB of turns (docs/benchmarks.md records that run).
func TestReadersStayBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~120 MB")
	}
	body := int64(64 << 20)
	if os.Getenv("TURNLOG_MEMTEST_FULL") != "" {
		body = 1 << 30
	}
	ctx := context.Background()
	dir := t.TempDir()
	loc := sessionlog.Location{Namespace: "team-a", Session: "huge", UID: "u1"}
	root, _ := loc.Root()
	start := time.Now()
	next, lastEnd := writeHugeLog(t, filepath.Join(dir, filepath.FromSlash(root)), body)
	t.Logf("wrote %d events (%d MB of turns and a 2M-event segment) in %v", next, body>>20, time.Since(start).Round(time.Millisecond))

	forged := filepath.Join(dir, filepath.FromSlash(root), "derived", "assembly", "checkpoint.json")
	writeFile(t, forged, func(w *bufio.Writer) {
		w.WriteString(`{"summary":{"task":"assemble","throughSeq":0,"new":[`)
		for i := range 2_000_000 {
			fmt.Fprintf(w, `{"seq":%d,"cause":"kind","message":"forged"},`, i)
		}
		w.WriteString(`{}]}}`)
	})

	b, err := store.Open(ctx, "file://"+dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	logs := sessionlog.New(b)
	lg, err := logs.Log(loc)
	if err != nil {
		t.Fatal(err)
	}

	peak := measureHeap(t, func() {
		h, err := lg.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h.Next != next || !(h.LastTurnEnd != nil && h.LastTurnEnd.Seq == lastEnd) {
			t.Fatalf("Head = %+v, want next %d and the last turn/end at %d", h, next, lastEnd)
		}
	}, "head")
	peak = max(peak, measureHeap(t, func() {
		if _, _, err := derived.LoadAssembly(ctx, derived.StoreLog{Log: lg}); !errors.Is(err, derived.ErrUnusable) {
			t.Fatalf("LoadAssembly of a forged checkpoint of 2M diagnostics = %v, want ErrUnusable", err)
		}
		if _, found, err := derived.LoadReplay(ctx, derived.StoreLog{Log: lg}, loggen.Adapter); err != nil || found {
			t.Fatalf("LoadReplay = %v, %v; want nothing found", found, err)
		}
	}, "checkpoints"))
	peak = max(peak, measureHeap(t, func() {
		// The first assembly of the whole log, past the forged checkpoint.
		sum, err := Assemble(ctx, derived.StoreLog{Log: lg})
		if err != nil {
			t.Fatal(err)
		}
		if sum.ThroughSeq != lastEnd || sum.ScannedThrough != next-1 {
			t.Fatalf("assembly through %d, scanned through %d; want %d and %d", sum.ThroughSeq, sum.ScannedThrough, lastEnd, next-1)
		}
	}, "assemble"))
	peak = max(peak, measureHeap(t, func() {
		// Through the middle of the 2M-event segment: its first million
		// events are rewritten, the rest of the log copied.
		child := sessionlog.Location{Namespace: "team-a", Session: "fork", UID: "u2"}
		if err := logs.CopyPrefix(ctx, loc, child, next-1_000_000); err != nil {
			t.Fatal(err)
		}
	}, "fork"))
	peak = max(peak, measureHeap(t, func() {
		w := bufio.NewWriter(io.Discard)
		n := int64(0)
		for e, err := range lg.Read(ctx, 0, math.MaxInt64) {
			if err != nil {
				t.Fatal(err)
			}
			w.Write(e.Line)
			w.WriteByte('\n')
			n++
		}
		if n != next {
			t.Fatalf("export read %d events, want %d", n, next)
		}
	}, "export"))
	t.Logf("peak heap over the baseline: %.1f MiB (bound %d MiB)", float64(peak)/(1<<20), heapBound>>20)
}

// writeHugeLog writes a log's segments under root: turns of ~256 KB in
// segments of ~32 MB, body bytes in all, then one segment of 2M events of
// an unknown type (outside any turn, so the log stays valid). It returns
// the number of events and the seq of the last turn/end.
func writeHugeLog(t *testing.T, root string, body int64) (next, lastEnd int64) {
	text := strings.Repeat("the session log keeps every turn ", 2000)[:64<<10]
	var written int64
	turn := int64(0)
	for written < body {
		first := next
		writeFile(t, filepath.Join(root, "log", fmt.Sprintf("%020d.jsonl", first)), func(w *bufio.Writer) {
			for size := 0; size < 32<<20 && written < body; {
				turn++
				lines := []string{fmt.Sprintf(`{"seq":%d,"type":"turn/start","turn":%d}`, next, turn)}
				for i := range 4 {
					lines = append(lines, fmt.Sprintf(`{"seq":%d,"type":"chunk","turn":%d,"response":0,"block":%d,"delta":{"type":"text","text":"%s"}}`, next+1+int64(i), turn, i, text))
				}
				lines = append(lines, fmt.Sprintf(`{"seq":%d,"type":"turn/end","turn":%d,"reason":"stop"}`, next+5, turn))
				lastEnd = next + 5
				next += 6
				for _, l := range lines {
					w.WriteString(l)
					w.WriteByte('\n')
					size += len(l) + 1
					written += int64(len(l) + 1)
				}
			}
		})
	}
	first := next
	writeFile(t, filepath.Join(root, "log", fmt.Sprintf("%020d.jsonl", first)), func(w *bufio.Writer) {
		line := make([]byte, 0, 64)
		for range 2_000_000 {
			line = append(line[:0], `{"seq":`...)
			line = strconv.AppendInt(line, next, 10)
			line = append(line, `,"type":"n"}`+"\n"...)
			w.Write(line)
			next++
		}
	})
	return next, lastEnd
}

func writeFile(t *testing.T, path string, fill func(*bufio.Writer)) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fill(w)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// measureHeap runs f with the runtime's memory limit set to heapBound over
// the heap in use before it, samples the heap's objects every millisecond
// while it runs, and fails the test if the peak goes over the bound. The
// limit makes the collector work to stay under it, so the peak is what f
// holds live, not garbage it has not collected yet.
func measureHeap(t *testing.T, f func(), what string) uint64 {
	t.Helper()
	return measureHeapWithin(t, heapBound, f, what)
}

// measureHeapWithin is measureHeap with another bound.
func measureHeapWithin(t *testing.T, bound uint64, f func(), what string) uint64 {
	t.Helper()
	over, took := heappeak.Over(bound, f)
	t.Logf("%s: peak heap %.1f MiB over the baseline, %v", what, float64(over)/(1<<20), took.Round(time.Millisecond))
	if over > bound {
		t.Errorf("%s: peak heap %.1f MiB over the baseline, more than the bound of %d MiB", what, float64(over)/(1<<20), bound>>20)
	}
	return over
}
