package compare

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/worker"
)

// benchTurn is turn n of a long conversation, about 4.8 KB: a question
// and an answer streamed in six chunks, so that 10,000 turns make the
// 48 MB log that comparing by lineage was measured on.
func benchTurn(n int, answer string) [][]byte {
	text := strings.Repeat(answer+" ", 700/(len(answer)+1))
	events := [][]byte{
		fmt.Appendf(nil, `{"type":"turn/start","turn":%d}`, n),
		fmt.Appendf(nil, `{"type":"user/message","turn":%d,"content":[{"type":"text","text":"question %d: %s"}]}`, n, n, strings.Repeat("why ", 40)),
		fmt.Appendf(nil, `{"type":"response/start","turn":%d,"response":0}`, n),
	}
	for block := range 6 {
		events = append(events, fmt.Appendf(nil, `{"type":"chunk","turn":%d,"response":0,"block":0,"delta":{"type":"text","text":"%d %s"}}`, n, block, text))
	}
	return append(events,
		fmt.Appendf(nil, `{"type":"response/finish","turn":%d,"response":0,"stopReason":"stop"}`, n),
		fmt.Appendf(nil, `{"type":"turn/end","turn":%d,"reason":"stop"}`, n))
}

// segmentReads counts the bytes read of log segments, to tell them from
// the transcripts' in what a comparison reads.
type segmentReads struct {
	store.Bucket
	bytes atomic.Int64
}

func (s *segmentReads) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	r, err := s.Bucket.NewRangeReader(ctx, key, offset, length)
	if err != nil || !strings.Contains(key, "/log/") {
		return r, err
	}
	return countedReader{r, &s.bytes}, nil
}

type countedReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r countedReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	return n, err
}

// BenchmarkCompareByLineage compares a Session of 10,000 turns, a segment
// each as a host flushes them, with its child forked by reference 10 turns
// before its end and given 10 turns of its own, both assembled and
// replayed: from seq 0 (Compare) and from the fork point its lineage gives
// (SharedThrough from the two Sessions' records, then CompareFrom, which
// counts the prefix from the assembly state kept before the cut and reads
// the transcripts' parts after it). It reports the bytes read of the
// store, logs and transcripts, and of the logs alone.
func BenchmarkCompareByLineage(b *testing.B) {
	const turns, after = 10000, 10
	ctx := context.Background()
	bucket, err := store.Open(ctx, "mem://", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bucket.Close()
	segments := &segmentReads{Bucket: bucket}
	counting := storetest.NewCounting(segments)
	logs := sessionlog.New(counting)
	open := func(name string) *sessionlog.Log {
		l, err := logs.Log(location(name))
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	appender := open("long").NewAppender("")
	var cut int64
	for n := 1; n <= turns; n++ {
		events := benchTurn(n, "the answer")
		first, err := appender.Append(ctx, events...)
		if err != nil {
			b.Fatal(err)
		}
		if n == turns-after {
			cut = first + int64(len(events)) - 1
		}
	}
	if _, err := logs.Fork(ctx, location("long"), location("long-retry"), cut, nil); err != nil {
		b.Fatal(err)
	}
	appender = open("long-retry").NewAppender("")
	for n := turns - after + 1; n <= turns; n++ {
		if _, err := appender.Append(ctx, benchTurn(n, "another answer")...); err != nil {
			b.Fatal(err)
		}
	}
	for _, name := range []string{"long", "long-retry"} {
		if _, err := worker.Assemble(ctx, derived.StoreLog{Log: open(name)}); err != nil {
			b.Fatal(err)
		}
		if _, err := worker.Replay(ctx, derived.StoreLog{Log: open(name)}, turnlog.Adapter{}); err != nil {
			b.Fatal(err)
		}
	}
	records := recordsOf("", forkedSession("long", nil), forkedSession("long-retry", &fork{"long", cut}))
	source, child := Branch{Name: "team-a/long", Log: storedLog{open("long")}}, Branch{Name: "team-a/long-retry", Log: storedLog{open("long-retry")}}
	for _, way := range []struct {
		name string
		same func() int64
	}{
		{"from=0", func() int64 { return -1 }},
		{"from=lineage", func() int64 { return SharedThrough(ctx, records, sessionRef("long"), sessionRef("long-retry")) }},
	} {
		b.Run(way.name, func(b *testing.B) {
			counting.Reset()
			segments.bytes.Store(0)
			for b.Loop() {
				c, err := CompareFrom(ctx, source, child, way.same())
				if err != nil || c.Shared.CutSeq != cut {
					b.Fatalf("shared %+v, %v; want the cut at %d", c.Shared, err, cut)
				}
			}
			b.ReportMetric(float64(counting.Counts().BytesRead)/float64(b.N), "bytes-read/op")
			b.ReportMetric(float64(segments.bytes.Load())/float64(b.N), "log-bytes/op")
		})
	}
}
