package agenthost

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/worker"
)

func versityBucket(b *testing.B) store.Bucket {
	srv := versitygw.Start(b)
	bk, err := store.Open(context.Background(), srv.URL, srv.Options())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bk.Close() })
	return bk
}

// BenchmarkAppender streams events as fast as one host can add them into
// a log on versitygw, with the default 100 ms flush interval: a response of
// 63 text deltas (~120 bytes each) and its finish, four responses a turn.
// It reports events/s and the p50/p99 time of one segment write.
//
//	go test ./agenthost -run '^$' -bench BenchmarkAppender -benchtime 20000x
func BenchmarkAppender(b *testing.B) {
	l := openTestLog(b, versityBucket(b))
	a := l.Appender(AppenderOptions{})
	var mu sync.Mutex
	var lat []time.Duration
	a.flushed = func(d time.Duration, _ int) {
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
	}
	ctx := context.Background()
	adapter := Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}
	text := "The quick brown fox jumps over the lazy dog; the stream goes on and on, a delta at a time, as models write."
	turn, resp, block := int64(1), 0, 0
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(a.Add(ctx, TurnStart(turn), UserText(turn, "go"), ResponseStart(turn, resp, adapter)))
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		switch {
		case i%64 == 63:
			must(a.Add(ctx, ResponseFinish(turn, resp, StopReasonStop, nil, nil)))
			resp++
			if resp == 4 {
				must(a.Add(ctx, TurnEnd(turn, StopReasonStop)))
				turn, resp = turn+1, 0
				must(a.Add(ctx, TurnStart(turn), UserText(turn, "go on")))
			}
			must(a.Add(ctx, ResponseStart(turn, resp, adapter)))
		default:
			must(a.Add(ctx, TextDelta(turn, resp, block, text)))
		}
	}
	must(a.Close(ctx))
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-flush-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-flush-ms")
	b.ReportMetric(float64(len(lat)), "segments")
}

// tenKTurns is a 10,000-turn log: a user message, a streamed response of
// thinking and text with its version-2 envelope, 8 events a turn.
func tenKTurns(turns int) []Event {
	adapter := Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}
	events := []Event{SessionStart(adapter)}
	for t := int64(1); t <= int64(turns); t++ {
		events = append(events,
			TurnStart(t),
			UserText(t, fmt.Sprintf("Question %d: what does the function on line %d do?", t, t)),
			ResponseStart(t, 0, adapter),
			ThinkingDelta(t, 0, 0, "Read the function first, then explain it briefly.", false),
			TextDelta(t, 0, 1, "It parses the header, checks the version and "),
			TextDelta(t, 0, 1, "returns the entries in file order."),
			ResponseFinish(t, 0, StopReasonStop, &Envelope{
				Response: map[string]string{"id": fmt.Sprintf("msg_%d", t)},
				Blocks:   []*BlockState{{Type: "thinking", Signature: "EqQBCkYIBxgCKkDsig"}, {Type: "text", Signature: "txt"}},
			}, nil),
			TurnEnd(t, StopReasonStop))
	}
	return events
}

// BenchmarkTranscript compares what a host resuming a 10,000-turn Session
// does with the stored transcript (read the replay checkpoint and the
// parts the workers stored) with what it would do without it (export the
// log and replay it), on a file:// store and on versitygw. runs is how
// many replay runs stored the transcript: 1 for a Session imported whole,
// 100 for one the workers followed every 100 turns, 1,000 for one they
// followed every 10; the parts metric is how many parts those runs left.
//
//	go test ./agenthost -run '^$' -bench BenchmarkTranscript -benchtime 10x
func BenchmarkTranscript(b *testing.B) {
	const turns = 10_000
	events := tenKTurns(turns)
	for _, backend := range []string{"file", "versitygw"} {
		for _, runs := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("%s/runs=%d", backend, runs), func(b *testing.B) {
				var bk store.Bucket
				if backend == "file" {
					var err error
					if bk, err = store.Open(context.Background(), "file://"+b.TempDir(), nil); err != nil {
						b.Fatal(err)
					}
					defer bk.Close()
				} else {
					bk = versityBucket(b)
				}
				l := openTestLog(b, bk)
				ctx := context.Background()
				a := l.AppenderAt(0, AppenderOptions{FlushInterval: -1, NoNudge: true})
				per := (len(events) - 1) / runs
				for r := range runs {
					lo, hi := 1+r*per, 1+(r+1)*per
					if r == 0 {
						lo = 0
					}
					for i := lo; i < hi; i += 2000 {
						must(b, a.Add(ctx, events[i:min(i+2000, hi)]...))
						must(b, a.Flush(ctx))
					}
					if _, err := worker.Replay(ctx, l.workerLog(), Adapter{}); err != nil {
						b.Fatal(err)
					}
				}
				must(b, a.Close(ctx))
				parts := 0
				for o, err := range bk.List(ctx, "") {
					must(b, err)
					if strings.HasSuffix(o.Key, ".jsonl") && strings.Contains(o.Key, "/derived/") {
						parts++
					}
				}

				b.Run("stored", func(b *testing.B) {
					for range b.N {
						tr, err := l.Transcript(ctx)
						if err != nil || len(tr.Messages) != 2*turns {
							b.Fatalf("%d messages, %v", len(tr.Messages), err)
						}
					}
					b.ReportMetric(float64(parts), "parts")
				})
				b.Run("export+replay", func(b *testing.B) {
					for range b.N {
						var buf bytes.Buffer
						must(b, l.Export(ctx, &buf))
						res, err := replay.Transcript(turnlog.NewReader(&buf).All(), replay.Options{Through: replay.Head})
						if err != nil || len(res.Messages) != 2*turns {
							b.Fatalf("%d messages, %v", len(res.Messages), err)
						}
					}
				})
			})
		}
	}
}

func must(b *testing.B, err error) {
	if err != nil {
		b.Fatal(err)
	}
}
