package sessionlog_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
)

const root = "sessions/default/chat/6b1f0c2e-uid/"

// readErr reads the whole log and returns the error that ended it.
func readErr(t *testing.T, lg *sessionlog.Log) error {
	t.Helper()
	for _, err := range lg.Read(ctx(t), 0, math.MaxInt64) {
		if err != nil {
			return err
		}
	}
	return nil
}

func wantDataError(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	var de *sessionlog.DataError
	if !errors.As(err, &de) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("%s: error = %v, want a one-line DataError", what, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("%s: error = %v, want it to contain %q", what, err, p)
		}
	}
}

// TestLineLimit: a stored line over the line limit is refused by every
// reader, naming the segment, line and seq, without reading it whole.
func TestLineLimit(t *testing.T) {
	mem := storetest.Open(t, "mem://", nil)
	lg := openLog(t, mem, loc)
	long := `{"seq":1,"type":"a","x":"` + strings.Repeat("y", sessionlog.MaxLineBytes) + `"}` + "\n"
	key := root + "log/00000000000000000000.jsonl"
	if err := mem.PutIfAbsent(ctx(t), key, []byte(`{"seq":0,"type":"a"}`+"\n"+long), nil); err != nil {
		t.Fatal(err)
	}
	_, headErr := lg.Head(ctx(t))
	for what, err := range map[string]error{"Read": readErr(t, lg), "Head": headErr} {
		wantDataError(t, what, err, key+" line 2 (seq 1)", "line longer than the limit of 16 MiB")
	}
	// A writer refuses such an event before anything is stored.
	_, err := lg.NewAppender("").Append(ctx(t), []byte(`{"type":"a","x":"`+strings.Repeat("y", sessionlog.MaxLineBytes)+`"}`))
	if err == nil || !strings.Contains(err.Error(), "longer than the line limit of 16 MiB") {
		t.Fatalf("appending an event over the line limit = %v, want a refusal", err)
	}
}

// TestSegmentLimit: a segment over MaxSegmentBytes is refused by readers
// with its key and size, and no writer creates one.
func TestSegmentLimit(t *testing.T) {
	mem := storetest.Open(t, "mem://", nil)
	lg := openLog(t, mem, loc)
	var seg bytes.Buffer
	line := strings.Repeat("z", 1<<20)
	for seq := 0; seg.Len() <= sessionlog.MaxSegmentBytes; seq++ {
		fmt.Fprintf(&seg, `{"seq":%d,"type":"a","x":"%s"}`+"\n", seq, line)
	}
	key := root + "log/00000000000000000000.jsonl"
	if err := mem.PutIfAbsent(ctx(t), key, seg.Bytes(), nil); err != nil {
		t.Fatal(err)
	}
	_, headErr := lg.Head(ctx(t))
	for what, err := range map[string]error{"Read": readErr(t, lg), "Head": headErr} {
		wantDataError(t, what, err, key, fmt.Sprintf("segment too large: %d bytes", seg.Len()), "maximum of 67108864 bytes (64 MiB)")
	}

	// An appender splits a batch of the same size instead.
	other := openLog(t, mem, sessionlog.Location{Namespace: "default", Session: "split", UID: "u"})
	var events [][]byte
	for range 70 {
		events = append(events, ev("chunk", 1, `,"x":"`+line+`"`))
	}
	first, err := other.NewAppender("").Append(ctx(t), events...)
	if err != nil || first != 0 {
		t.Fatalf("Append of 70 MiB = %d, %v", first, err)
	}
	sizes := segmentSizes(t, mem, "default/split/u/log/")
	if len(sizes) < 70/4 {
		t.Fatalf("70 MiB appended as %d segments, want them split at %d bytes", len(sizes), sessionlog.SplitBytes)
	}
	for _, size := range sizes {
		if size > sessionlog.SplitBytes {
			t.Fatalf("segment of %d bytes, more than the split size %d", size, sessionlog.SplitBytes)
		}
	}
	if got := readAll(t, other); len(got) != 70 || got[69].Seq != 69 {
		t.Fatalf("split batch reads back as %d events", len(got))
	}
}

func segmentSizes(t *testing.T, b store.Bucket, prefix string) []int64 {
	t.Helper()
	var sizes []int64
	for o, err := range b.List(ctx(t), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, o.Size)
	}
	return sizes
}

// TestAppendSplits: Append and AppendAt write a batch over the split size
// as consecutive segments, seqs dense, and report where the batch starts.
func TestAppendSplits(t *testing.T) {
	mem := storetest.Open(t, "mem://", nil)
	lg := openLog(t, mem, loc)
	a := lg.NewAppender("")
	a.SetSplitBytes(1000)
	var batch [][]byte
	for i := range 50 {
		batch = append(batch, ev("chunk", 1, fmt.Sprintf(`,"x":"%070d"`, i)))
	}
	if first, err := a.Append(ctx(t), batch...); err != nil || first != 0 {
		t.Fatalf("Append = %d, %v", first, err)
	}
	if err := a.AppendAt(ctx(t), 50, batch...); err != nil {
		t.Fatalf("AppendAt = %v", err)
	}
	sizes := segmentSizes(t, mem, root+"log/")
	if len(sizes) < 10 {
		t.Fatalf("two batches of ~5 KB with a split size of 1,000 bytes made %d segments", len(sizes))
	}
	for _, size := range sizes {
		if size > 1000 {
			t.Fatalf("segment of %d bytes, more than the split size", size)
		}
	}
	got := readAll(t, lg)
	if len(got) != 100 {
		t.Fatalf("log holds %d events, want 100", len(got))
	}
	for i, e := range got {
		if want := fmt.Sprintf(`"x":"%070d"`, i%50); !bytes.Contains(e.Line, []byte(want)) {
			t.Fatalf("event %d = %s, want %s", i, e.Line, want)
		}
	}
}

// TestDerivedLimit: a derived object over the reader's limit is refused
// with its key and size.
func TestDerivedLimit(t *testing.T) {
	mem := storetest.Open(t, "mem://", nil)
	lg := openLog(t, mem, loc)
	if err := lg.PutDerived(ctx(t), "replay/x/checkpoint.json", bytes.Repeat([]byte("1"), 5000)); err != nil {
		t.Fatal(err)
	}
	_, err := lg.GetDerived(ctx(t), "replay/x/checkpoint.json", 4096)
	wantDataError(t, "GetDerived", err, root+"derived/replay/x/checkpoint.json", "object of 5000 bytes is larger than the limit of 4096 bytes")
	if data, err := lg.GetDerived(ctx(t), "replay/x/checkpoint.json", 5000); err != nil || len(data) != 5000 {
		t.Fatalf("GetDerived at the limit = %d bytes, %v", len(data), err)
	}
}

// TestCopyPrefixPieces: the segment holding a fork's cut is rewritten in
// pieces of at most SplitBytes, so a copy never holds the segment.
func TestCopyPrefixPieces(t *testing.T) {
	mem := storetest.Open(t, "mem://", nil)
	src := openLog(t, mem, loc)
	a := src.NewAppender("")
	a.SetSplitBytes(sessionlog.MaxSegmentBytes) // one segment of ~10 MiB
	var batch [][]byte
	for i := range 10 {
		batch = append(batch, ev("chunk", 1, fmt.Sprintf(`,"i":%d,"x":"%s"`, i, strings.Repeat("w", 1<<20))))
	}
	if _, err := a.Append(ctx(t), batch...); err != nil {
		t.Fatal(err)
	}
	dst := sessionlog.Location{Namespace: "default", Session: "fork", UID: "u2"}
	for range 2 { // the second run finds the copy done
		if err := sessionlog.New(mem).CopyPrefix(ctx(t), loc, dst, 8); err != nil {
			t.Fatal(err)
		}
	}
	sizes := segmentSizes(t, mem, "default/fork/u2/log/")
	if len(sizes) != 3 {
		t.Fatalf("9 lines of 1 MiB copied as %d segments, want 3 of at most %d bytes", len(sizes), sessionlog.SplitBytes)
	}
	all, child := readAll(t, src), readAll(t, openLog(t, mem, dst))
	if len(child) != 9 {
		t.Fatalf("child has %d events, want 9", len(child))
	}
	for i := range child {
		if !bytes.Equal(child[i].Line, all[i].Line) {
			t.Fatalf("child event %d differs from the source's", i)
		}
	}
}

// TestCopyPrefixMergesSmallSegments: a host that flushes every turn leaves
// a segment per turn; a fork's child holds runs of them merged, so reading
// or forking the child costs a request per merged segment, not per turn.
// Large segments are still copied inside the service, and a small segment
// whose lines are not what the listing says fails the copy by name.
func TestCopyPrefixMergesSmallSegments(t *testing.T) {
	c := storetest.NewCounting(storetest.Open(t, "mem://", nil))
	src := openLog(t, c, loc)
	a := src.NewAppender("")
	appendOne := func(e []byte) {
		t.Helper()
		if _, err := a.Append(ctx(t), e); err != nil {
			t.Fatal(err)
		}
	}
	// 300 small segments, one of 300 KiB, 300 small segments: seqs 0..600.
	for i := range 300 {
		appendOne(ev("chunk", 1, fmt.Sprintf(`,"i":%d`, i)))
	}
	appendOne(ev("chunk", 1, fmt.Sprintf(`,"x":%q`, strings.Repeat("w", 300<<10))))
	for i := range 300 {
		appendOne(ev("chunk", 2, fmt.Sprintf(`,"i":%d`, i)))
	}

	dst := sessionlog.Location{Namespace: "default", Session: "fork", UID: "u2"}
	for run := range 2 { // the second run finds the copy done
		c.Reset()
		if err := sessionlog.New(c).CopyPrefix(ctx(t), loc, dst, 600); err != nil {
			t.Fatal(err)
		}
		if got := c.Counts(); run == 0 && (got.Copies != 1 || got.Creates != 2) {
			t.Errorf("copy of 601 segments, one large: %d copies and %d creates, want 1 and 2", got.Copies, got.Creates)
		}
	}
	if n := len(segmentSizes(t, c, "default/fork/u2/log/")); n != 3 {
		t.Errorf("the child holds %d segments, want 3: the small ones before the large one, it, the small ones after", n)
	}
	all, child := readAll(t, src), readAll(t, openLog(t, c, dst))
	if len(child) != len(all) {
		t.Fatalf("child has %d events, want %d", len(child), len(all))
	}
	for i := range child {
		if !bytes.Equal(child[i].Line, all[i].Line) {
			t.Fatalf("child event %d differs from the source's", i)
		}
	}

	// The next fork copies the run of small segments before the large one,
	// kept by the first, inside the service; the run after it ends at the
	// cut, so it is read again.
	c.Reset()
	again := sessionlog.Location{Namespace: "default", Session: "fork-again", UID: "u5"}
	if err := sessionlog.New(c).CopyPrefix(ctx(t), loc, again, 600); err != nil {
		t.Fatal(err)
	}
	if got := c.Counts(); got.Copies != 2 || got.Creates != 1 || got.Gets+got.RangeReads > 301 {
		t.Errorf("second fork: %d copies, %d creates, %d reads; want 2, 1 and at most 301", got.Copies, got.Creates, got.Gets+got.RangeReads)
	}
	if again := readAll(t, openLog(t, c, again)); len(again) != len(all) || !bytes.Equal(again[299].Line, all[299].Line) {
		t.Fatalf("second fork's child has %d events, want %d", len(again), len(all))
	}

	// A segment listed as seqs 0..4 that holds 3 lines.
	bad := sessionlog.Location{Namespace: "default", Session: "bad", UID: "u3"}
	badRoot := "default/bad/u3/log/"
	line := func(seq int64) string { return fmt.Sprintf(`{"seq":%d,"type":"chunk","turn":1}`+"\n", seq) }
	for key, data := range map[string]string{
		badRoot + "00000000000000000000.jsonl": line(0) + line(1) + line(2),
		badRoot + "00000000000000000005.jsonl": line(5),
		badRoot + "00000000000000000006.jsonl": line(6),
	} {
		if err := c.PutIfAbsent(ctx(t), key, []byte(data), nil); err != nil {
			t.Fatal(err)
		}
	}
	to := sessionlog.Location{Namespace: "default", Session: "bad-fork", UID: "u4"}
	err := sessionlog.New(c).CopyPrefix(ctx(t), bad, to, 6)
	wantDataError(t, "CopyPrefix", err, badRoot+"00000000000000000000.jsonl", "in 3 lines", "seqs 0..4")
	if n := len(segmentSizes(t, c, "default/bad-fork/u4/log/")); n != 0 {
		t.Errorf("a failed copy created %d segments of the child", n)
	}
}
