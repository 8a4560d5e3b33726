package worker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// BenchmarkContextEdit: the replay run that applies one context edit to a
// 2,000-turn log in a file:// store, whose context is the whole log or,
// after a compaction keeping the last 20 turns, those turns. An edit of a
// message in the context reads the stored transcript (the context); an edit
// of a message an earlier edit left out also reads the log again from where
// the context starts. It reports the log events the run read.
//
//	go test ./internal/worker -run '^$' -bench BenchmarkContextEdit -benchtime 20x
func BenchmarkContextEdit(b *testing.B) {
	ctx := context.Background()
	loc := sessionlog.Location{Namespace: "bench", Session: "edits", UID: "u1"}
	base := loggen.Log(170_000, 7)
	var users []int64 // the seqs of the user messages
	for e, err := range turnlog.NewReader(bytes.NewReader(base)).All() {
		if err != nil {
			break
		}
		if e.Type == turnlog.TypeUserMessage {
			users = append(users, e.Seq)
		}
	}
	turns := len(users)
	for _, compacted := range []bool{false, true} {
		for _, removedFirst := range []bool{false, true} {
			name := fmt.Sprintf("context=%d-turns/edit", turns)
			if compacted {
				name = "context=20-turns/edit"
			}
			if removedFirst {
				name += "-after-removal"
			}
			b.Run(name, func(b *testing.B) {
				target := users[turns-5]
				var setup, measured [][]byte
				add := func(to *[][]byte, format string, args ...any) {
					*to = append(*to, fmt.Appendf(nil, `{`+format+`}`, args...))
				}
				if compacted {
					add(&setup, `"type":"context/compaction","content":"the first %d turns","firstKeptSeq":%d`, turns-20, users[turns-20])
				}
				if removedFirst {
					add(&setup, `"type":"context/edit","targetSeq":%d,"replacement":null`, target)
				}
				add(&measured, `"type":"context/edit","targetSeq":%d,"replacement":{"content":"[redacted]"}`, target)

				prepared := b.TempDir()
				_, prep := openFileLog(b, prepared, loc)
				lg := prep.Log
				appendLines(b, lg, bytes.SplitAfter(base, []byte("\n")))
				appendLines(b, lg, setup)
				if _, err := Replay(ctx, derived.StoreLog{Log: lg}, loggen.Adapter); err != nil {
					b.Fatal(err)
				}
				appendLines(b, lg, measured)

				var read int
				for b.Loop() {
					b.StopTimer()
					dir := b.TempDir()
					if err := os.CopyFS(dir, os.DirFS(prepared)); err != nil {
						b.Fatal(err)
					}
					_, fresh := openFileLog(b, dir, loc)
					log := &countingLog{Log: fresh}
					b.StartTimer()
					sum, err := Replay(ctx, log, loggen.Adapter)
					if err != nil {
						b.Fatal(err)
					}
					if sum.Replay.RunEdits != 1 {
						b.Fatalf("the run applied %d edits, want 1", sum.Replay.RunEdits)
					}
					read = log.events
				}
				b.ReportMetric(float64(read), "log-events-read/op")
			})
		}
	}
}

// appendLines appends log lines, their seqs taken off: the log numbers
// what it is given.
func appendLines(b testing.TB, lg *sessionlog.Log, lines [][]byte) {
	a := lg.NewAppender("bench")
	var events [][]byte
	for _, l := range lines {
		if l = bytes.TrimSpace(l); len(l) > 0 {
			events = append(events, seqPrefix.ReplaceAll(l, []byte("{")))
		}
	}
	for len(events) > 0 {
		n := min(len(events), 5000)
		if _, err := a.Append(context.Background(), events[:n]...); err != nil {
			b.Fatal(err)
		}
		events = events[n:]
	}
}

var seqPrefix = regexp.MustCompile(`^\{"seq":\d+,`)

// countingLog counts the log events a run reads.
type countingLog struct {
	derived.Log
	events int
}

func (c *countingLog) Events(ctx context.Context, from int64) turnlog.Events {
	return func(yield func(turnlog.Event, error) bool) {
		for e, err := range c.Log.Events(ctx, from) {
			if err == nil {
				c.events++
			}
			if !yield(e, err) {
				return
			}
		}
	}
}
