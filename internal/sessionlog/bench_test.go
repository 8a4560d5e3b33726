package sessionlog_test

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
)

func chunk(turn, i int) []byte {
	return ev("chunk", turn, fmt.Sprintf(`,"response":0,"block":0,"delta":{"type":"text","text":"token %d of a streamed answer"}`, i))
}

// BenchmarkAppend measures appends against a real S3 server: one writer
// appending one event or a batch of 100 per request, and 4 writers
// appending to the same log at once.
func BenchmarkAppend(b *testing.B) {
	srv := versitygw.Start(b)
	bucket := openURL(b, srv.URL, srv.Options())
	for _, c := range []struct{ writers, batch int }{{1, 1}, {1, 100}, {4, 1}} {
		b.Run(fmt.Sprintf("writers=%d/events=%d", c.writers, c.batch), func(b *testing.B) {
			lg := openLog(b, bucket, sessionlog.Location{Namespace: "bench", Session: fmt.Sprintf("w%d-e%d", c.writers, c.batch), UID: fmt.Sprint(b.N)})
			events := make([][]byte, c.batch)
			for i := range events {
				events[i] = chunk(1, i)
			}
			size := 0
			for _, e := range events {
				size += len(e)
			}
			b.SetBytes(int64(size))
			var wg sync.WaitGroup
			b.ResetTimer()
			for w := range c.writers {
				wg.Go(func() {
					a := lg.NewAppender("")
					for i := w; i < b.N; i += c.writers {
						if _, err := a.Append(ctx(b), events...); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N*c.batch)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkCopyPrefix measures what a prefix copy costs: requests and event
// bytes through the process, for logs of 10^3, 10^5 and 10^6 events in
// segments of 100 (10^3) or 1,000 events, cut at a segment boundary and in
// the middle of a segment.
func BenchmarkCopyPrefix(b *testing.B) {
	type backendCase struct {
		name  string
		open  func(testing.TB) store.Bucket
		sizes []int
	}
	cases := []backendCase{
		{"mem", func(t testing.TB) store.Bucket { return openURL(t, "mem://", nil) }, []int{1e3, 1e5, 1e6}},
		{"versitygw", func(t testing.TB) store.Bucket {
			srv := versitygw.Start(t)
			return openURL(t, srv.URL, srv.Options())
		}, []int{1e3, 1e5}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			counting := storetest.NewCounting(bc.open(b))
			s := sessionlog.New(counting)
			for _, n := range bc.sizes {
				segSize := min(1000, n/10)
				src := sessionlog.Location{Namespace: "bench", Session: fmt.Sprintf("src-%d", n), UID: "u"}
				buildLog(b, openLog(b, counting, src), n, segSize)
				for _, cut := range []struct {
					name string
					seq  int
				}{{"boundary", n/2 - 1}, {"mid-segment", n/2 + segSize/2}} {
					b.Run(fmt.Sprintf("events=%d/cut=%s", n, cut.name), func(b *testing.B) {
						var requests, copies, through int64
						for i := range b.N {
							dst := sessionlog.Location{Namespace: "bench", Session: fmt.Sprintf("dst-%d-%s-%d-%d", n, cut.name, b.N, i), UID: "u"}
							counting.Reset()
							if err := s.CopyPrefix(ctx(b), src, dst, int64(cut.seq)); err != nil {
								b.Fatal(err)
							}
							c := counting.Counts()
							requests += c.Requests()
							copies += c.Copies
							through += c.BytesRead + c.BytesWritten
						}
						b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
						b.ReportMetric(float64(copies)/float64(b.N), "copies/op")
						b.ReportMetric(float64(through)/float64(b.N), "event-bytes-through/op")
					})
				}
			}
		})
	}
}

// buildLog appends n chunk events in segments of segSize.
func buildLog(b *testing.B, lg *sessionlog.Log, n, segSize int) {
	b.Helper()
	a := lg.NewAppender("")
	batch := make([][]byte, 0, segSize)
	for i := range n {
		batch = append(batch, chunk(1, i))
		if len(batch) == segSize || i == n-1 {
			if _, err := a.Append(ctx(b), batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// BenchmarkReadLog measures how fast the log's lines are read and checked:
// Head of a log of 300,000 streamed chunks and no turn/end (so it reads
// back through every segment, as the manager does for a turn that streams
// on), and a Read of the whole log (export, the workers), on file://.
func BenchmarkReadLog(b *testing.B) {
	bucket := openURL(b, "file://"+b.TempDir(), nil)
	lg := openLog(b, bucket, sessionlog.Location{Namespace: "bench", Session: "stream", UID: "u1"})
	events := [][]byte{ev("turn/start", 1, "")}
	for i := range 300_000 {
		events = append(events, chunk(1, i))
	}
	size := 0
	for _, e := range events {
		size += len(e) + 1
	}
	if _, err := lg.NewAppender("").Append(ctx(b), events...); err != nil {
		b.Fatal(err)
	}
	b.Run("head", func(b *testing.B) {
		b.SetBytes(int64(size))
		for range b.N {
			h, err := lg.Head(ctx(b))
			if err != nil || h.Next != int64(len(events)) {
				b.Fatalf("Head = %+v, %v", h, err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		b.SetBytes(int64(size))
		for range b.N {
			n := 0
			for _, err := range lg.Read(ctx(b), 0, math.MaxInt64) {
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n != len(events) {
				b.Fatalf("read %d events, want %d", n, len(events))
			}
		}
	})
}
