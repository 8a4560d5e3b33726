package sessionlog_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
)

// TestReadAheadReadsWhatStreamingReads reads a log of small segments and
// segments too large to be fetched ahead, over every kind of range and with
// early stops, with read-ahead on and off, and against a store that fails
// requests: both ways yield the same events, and a stop ends the Read.
func TestReadAheadReadsWhatStreamingReads(t *testing.T) {
	big := strings.Repeat("x", sessionlog.ReadAheadMaxBytes/4)
	bucket := storetest.Open(t, "mem://", nil)
	lg := openLog(t, bucket, sessionlog.Location{Namespace: "ra", Session: "mixed", UID: "u"})
	a := lg.NewAppender("")
	var want []string
	for s := range 40 {
		var batch [][]byte
		n := 1 + s%3
		if s%7 == 3 { // a segment over the read-ahead limit
			n = 5
		}
		for range n {
			extra := fmt.Sprintf(`,"n":%d`, len(want))
			if s%7 == 3 {
				extra += fmt.Sprintf(`,"pad":%q`, big)
			}
			batch = append(batch, ev("chunk", 1, extra))
			want = append(want, "")
		}
		if _, err := a.Append(ctx(t), batch...); err != nil {
			t.Fatal(err)
		}
	}
	// What a Read of everything streamed one segment after another yields.
	defer sessionlog.SetReadAhead(0)()
	for e, err := range lg.Read(ctx(t), 0, math.MaxInt64) {
		if err != nil {
			t.Fatal(err)
		}
		want[e.Seq] = fmt.Sprintf("%d %s", e.Seq, e.Line)
	}
	if !strings.Contains(want[len(want)-1], fmt.Sprintf(`"n":%d`, len(want)-1)) {
		t.Fatalf("the last event read is %.80s, want n=%d", want[len(want)-1], len(want)-1)
	}
	read := func(lg *sessionlog.Log, from, through int64, stopAfter int) ([]string, error) {
		var got []string
		for e, err := range lg.Read(ctx(t), from, through) {
			if err != nil {
				return got, err
			}
			got = append(got, fmt.Sprintf("%d %s", e.Seq, e.Line))
			if len(got) == stopAfter {
				break
			}
		}
		return got, nil
	}
	failing := &failingReads{Bucket: bucket}
	faulty := openLog(t, failing, sessionlog.Location{Namespace: "ra", Session: "mixed", UID: "u"})
	for _, ahead := range []int{8, 0} {
		restore := sessionlog.SetReadAhead(ahead)
		for _, c := range []struct {
			from, through int64
			stopAfter     int
		}{{0, math.MaxInt64, -1}, {5, 17, -1}, {13, 13, -1}, {0, math.MaxInt64, 9}, {20, math.MaxInt64, 1}, {int64(len(want)), math.MaxInt64, -1}} {
			for name, l := range map[string]*sessionlog.Log{"store": lg, "failing store": faulty} {
				got, err := read(l, c.from, c.through, c.stopAfter)
				if err != nil {
					t.Fatalf("read-ahead %d, %s, Read(%d, %d): %v", ahead, name, c.from, c.through, err)
				}
				exp := want[min(c.from, int64(len(want))) : min(c.through, int64(len(want))-1)+1]
				if c.stopAfter > 0 {
					exp = exp[:c.stopAfter]
				}
				if len(got) != len(exp) || strings.Join(got, "\n") != strings.Join(exp, "\n") {
					t.Errorf("read-ahead %d, %s, Read(%d, %d) stopping after %d: got %d events, want %d", ahead, name, c.from, c.through, c.stopAfter, len(got), len(exp))
				}
			}
		}
		restore()
	}
	if failing.failed.Load() == 0 {
		t.Error("the failing store failed no read")
	}
}

// failingReads fails every third object read as unavailable, as a store
// that drops connections does; the reader retries.
type failingReads struct {
	store.Bucket
	reads, failed atomic.Int64
}

func (f *failingReads) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if f.reads.Add(1)%3 == 0 {
		f.failed.Add(1)
		return nil, fmt.Errorf("read %s: %w", key, store.ErrUnavailable)
	}
	return f.Bucket.NewRangeReader(ctx, key, offset, length)
}

// BenchmarkReadManySmallSegments reads, against a real S3 server, a log
// written as a host that flushes every turn writes it: 2,000 segments of 5
// events, with read-ahead and one GET after another.
func BenchmarkReadManySmallSegments(b *testing.B) {
	srv := versitygw.Start(b)
	lg := openLog(b, storetest.Open(b, srv.URL, srv.Options()), sessionlog.Location{Namespace: "bench", Session: "small-segments", UID: "u"})
	const segments, perSegment = 2000, 5
	buildLog(b, lg, segments*perSegment, perSegment)
	for _, ahead := range []int{8, 0} {
		b.Run(fmt.Sprintf("read-ahead=%d", ahead), func(b *testing.B) {
			defer sessionlog.SetReadAhead(ahead)()
			for range b.N {
				if n := len(readAll(b, lg)); n != segments*perSegment {
					b.Fatalf("read %d events, want %d", n, segments*perSegment)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*segments), "µs/segment")
		})
	}
}

// BenchmarkForkManySmallSegments forks, against a real S3 server, the log
// of BenchmarkReadManySmallSegments at its head twice (the second fork
// finds the merged runs the first kept) and reads the child whole, as a
// fork's child is assembled: with small segments merged by the copy and
// with each copied as it is.
func BenchmarkForkManySmallSegments(b *testing.B) {
	srv := versitygw.Start(b)
	bucket := storetest.NewCounting(storetest.Open(b, srv.URL, srv.Options()))
	src := sessionlog.Location{Namespace: "bench", Session: "small-segments", UID: "u"}
	const segments, perSegment = 2000, 5
	buildLog(b, openLog(b, bucket, src), segments*perSegment, perSegment)
	for _, merge := range []bool{true, false} {
		b.Run(fmt.Sprintf("merge=%t", merge), func(b *testing.B) {
			if !merge {
				defer sessionlog.SetMergeBelow(0)()
			}
			var elapsed [3]time.Duration
			var requests [3]int64
			measure := func(i int, f func()) {
				bucket.Reset()
				start := time.Now()
				f()
				elapsed[i] += time.Since(start)
				requests[i] += bucket.Counts().Requests()
			}
			for i := range b.N {
				var child sessionlog.Location
				for fork := range 2 {
					child = sessionlog.Location{Namespace: "bench", Session: fmt.Sprintf("child-%t-%d-%d-%d", merge, b.N, i, fork), UID: "u"}
					measure(fork, func() {
						if err := sessionlog.New(bucket).CopyPrefix(ctx(b), src, child, segments*perSegment-1); err != nil {
							b.Fatal(err)
						}
					})
				}
				measure(2, func() {
					if n := len(readAll(b, openLog(b, bucket, child))); n != segments*perSegment {
						b.Fatalf("child holds %d events, want %d", n, segments*perSegment)
					}
				})
			}
			n := float64(b.N)
			for i, name := range []string{"first-fork", "next-fork", "child-read"} {
				b.ReportMetric(elapsed[i].Seconds()/n, name+"-s/op")
				b.ReportMetric(float64(requests[i])/n, name+"-requests/op")
			}
		})
	}
}
