package sessionlog_test

import (
	"fmt"
	"math"
	"strings"
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
	bucket := storetest.Open(b, srv.URL, srv.Options())
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
		{"mem", func(t testing.TB) store.Bucket { return storetest.Open(t, "mem://", nil) }, []int{1e3, 1e5, 1e6}},
		{"versitygw", func(t testing.TB) store.Bucket {
			srv := versitygw.Start(t)
			return storetest.Open(t, srv.URL, srv.Options())
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
	bucket := storetest.Open(b, "file://"+b.TempDir(), nil)
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

// BenchmarkFork compares a fork by reference (Fork) with a copy of the
// prefix (CopyPrefix, how forks were made before), on file:// (what make
// dev runs) and versitygw, for sources of 100, 1,000 and 10,000 turns
// written as a host that flushes every 28 turns writes them (10,000 turns:
// 60,000 events, 48 MB in 358 segments). Each is forked 10 events before
// its head (inside the last segment), in the middle, and the middle's
// child again near its own head (a fork of a fork). It reports the
// requests a fork makes, the bytes it sends, and what the child's root
// holds afterwards (server-side copies included); forks=200 forks the
// longest source 200 times and reports what all the children hold.
func BenchmarkFork(b *testing.B) {
	backends := []struct {
		name string
		open func(testing.TB) store.Bucket
	}{
		{"file", func(t testing.TB) store.Bucket { return storetest.Open(t, "file://"+t.TempDir(), nil) }},
		{"versitygw", func(t testing.TB) store.Bucket {
			srv := versitygw.Start(t)
			return storetest.Open(t, srv.URL, srv.Options())
		}},
	}
	type forkFunc func(s *sessionlog.Store, src, dst sessionlog.Location, cut int64) error
	ways := []struct {
		name string
		fork forkFunc
	}{
		{"reference", func(s *sessionlog.Store, src, dst sessionlog.Location, cut int64) error {
			_, err := s.Fork(ctx(b), src, dst, cut, nil)
			return err
		}},
		{"copy", func(s *sessionlog.Store, src, dst sessionlog.Location, cut int64) error {
			return s.CopyPrefix(ctx(b), src, dst, cut)
		}},
	}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			bucket := be.open(b)
			counting := storetest.NewCounting(bucket)
			s := sessionlog.New(counting)
			var runs int
			for _, turns := range []int{100, 1000, 10000} {
				src := sessionlog.Location{Namespace: "bench", Session: fmt.Sprintf("src-%d", turns), UID: "u"}
				head := buildTurns(b, openLog(b, bucket, src), turns, 28)
				for _, way := range ways {
					for _, cut := range []struct {
						name   string
						seq    int64
						ofFork bool
					}{{"head-10", head - 10, false}, {"middle", head/2 - 1, false}, {"fork-of-fork", head/2 - 10, true}} {
						b.Run(fmt.Sprintf("turns=%d/%s/cut=%s", turns, way.name, cut.name), func(b *testing.B) {
							from := src
							if cut.ofFork {
								from = sessionlog.Location{Namespace: "bench", Session: fmt.Sprintf("mid-%d-%s-%d", turns, way.name, runs), UID: "u"}
								runs++
								if err := way.fork(s, src, from, head/2-1); err != nil {
									b.Fatal(err)
								}
							}
							var requests, sent, stored, objects int64
							b.ResetTimer()
							b.StopTimer()
							for i := range b.N {
								dst := sessionlog.Location{Namespace: "bench", Session: fmt.Sprintf("dst-%d", runs), UID: fmt.Sprint(i)}
								runs++
								counting.Reset()
								b.StartTimer()
								if err := way.fork(s, from, dst, cut.seq); err != nil {
									b.Fatal(err)
								}
								b.StopTimer()
								c := counting.Counts()
								requests += c.Requests()
								sent += c.BytesWritten
								n, size := rootSize(b, bucket, dst)
								objects, stored = objects+n, stored+size
							}
							b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
							b.ReportMetric(float64(sent)/float64(b.N), "bytes-sent/op")
							b.ReportMetric(float64(stored)/float64(b.N), "child-bytes/op")
							b.ReportMetric(float64(objects)/float64(b.N), "child-objects/op")
						})
					}
				}
				if turns != 10000 {
					continue
				}
				for _, way := range ways {
					b.Run(fmt.Sprintf("turns=%d/%s/forks=200", turns, way.name), func(b *testing.B) {
						b.ResetTimer()
						b.StopTimer()
						for range b.N {
							var stored int64
							b.StartTimer()
							for i := range 200 {
								dst := sessionlog.Location{Namespace: "bench", Session: fmt.Sprintf("many-%d", runs), UID: fmt.Sprint(i)}
								runs++
								if err := way.fork(s, src, dst, head-int64(6*i)); err != nil {
									b.Fatal(err)
								}
								b.StopTimer()
								_, size := rootSize(b, bucket, dst)
								stored += size
								b.StartTimer()
							}
							b.StopTimer()
							b.ReportMetric(float64(stored), "children-bytes")
						}
					})
				}
			}
		})
	}
}

// buildTurns writes turns turns of 6 events (turn/start, a user message,
// three chunks of about 800 bytes, turn/end), perSegment turns to a
// segment, and returns the seq of the last event.
func buildTurns(b *testing.B, lg *sessionlog.Log, turns, perSegment int) int64 {
	b.Helper()
	a := lg.NewAppender("")
	text := strings.Repeat("a streamed answer, ", 40)
	var batch [][]byte
	for t := 1; t <= turns; t++ {
		batch = append(batch, ev("turn/start", t, ""), ev("user/message", t, `,"content":[{"type":"text","text":"question"}]`))
		for i := range 3 {
			batch = append(batch, ev("chunk", t, fmt.Sprintf(`,"response":0,"block":%d,"delta":{"type":"text","text":%q}`, i, text)))
		}
		batch = append(batch, ev("turn/end", t, `,"reason":"stop"`))
		if t%perSegment == 0 || t == turns {
			if _, err := a.Append(ctx(b), batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	return int64(6*turns - 1)
}

// rootSize is how many objects, and bytes, a Session's root holds.
func rootSize(b *testing.B, bucket store.Bucket, loc sessionlog.Location) (n, size int64) {
	root, err := loc.Root()
	if err != nil {
		b.Fatal(err)
	}
	for o, err := range bucket.List(ctx(b), root) {
		if err != nil {
			b.Fatal(err)
		}
		n, size = n+1, size+o.Size
	}
	return n, size
}
