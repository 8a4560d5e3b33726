//go:build unix

package replay_test

import (
	"bytes"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// BenchmarkReplay replays a generated 100,000-event log side by side with a
// decode-only pass over the same bytes (the validating Reader alone), which
// is the floor replay cannot beat.
func BenchmarkReplay(b *testing.B) {
	data := loggen.Log(100_000, 1)
	events := int64(bytes.Count(data, []byte("\n")))
	report := func(b *testing.B) {
		b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	}
	b.Run("decode-only", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			for _, err := range turnlog.NewReader(bytes.NewReader(data)).All() {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		report(b)
	})
	b.Run("replay", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			res, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(data)).All(), replay.Options{Through: replay.Head})
			if err != nil {
				b.Fatal(err)
			}
			if res.Counts.Native == 0 {
				b.Fatal("nothing replayed native")
			}
		}
		report(b)
	})
}

// BenchmarkReplayInterleaved splits the log into segments of whole turns and
// runs the decode-only pass and the replay over each segment in turn, so load
// from elsewhere on the machine falls on both alike. Each pass is timed by
// the process's CPU time as well as by the clock: on a shared machine the
// clock also counts the time spent waiting for a core, which varies from pass
// to pass far more than the work does, while CPU time counts the work alone —
// garbage collection on other threads included. A collection before each
// timed pass keeps one pass's garbage from being collected on the other's
// clock. The MB/s and events/s metrics are per CPU second.
func BenchmarkReplayInterleaved(b *testing.B) {
	data := loggen.Log(100_000, 1)
	segments := turnSegments(b, data, 1000)
	decodeSegment := func(b *testing.B, seg segment, add func(e *turnlog.Event)) {
		r := turnlog.NewReaderWith(bytes.NewReader(seg.data), turnlog.NewValidatorAt(seg.first))
		for e, err := range r.All() {
			if err != nil {
				b.Fatal(err)
			}
			add(&e)
		}
	}
	var decode, replayed timer
	for b.Loop() {
		builder := replay.NewBuilder(replay.Options{Through: replay.Head})
		for _, seg := range segments {
			runtime.GC()
			decode.time(b, func() { decodeSegment(b, seg, func(*turnlog.Event) {}) })
			runtime.GC()
			replayed.time(b, func() { decodeSegment(b, seg, builder.Add) })
		}
		replayed.time(b, func() {
			if res := builder.Result(); res.Counts.Native == 0 {
				b.Fatal("nothing replayed native")
			}
		})
	}
	mb := float64(len(data)) * float64(b.N) / 1e6
	events := float64(bytes.Count(data, []byte("\n"))) * float64(b.N)
	b.ReportMetric(mb/decode.cpu.Seconds(), "decode-only-MB/s")
	b.ReportMetric(events/decode.cpu.Seconds(), "decode-only-events/s")
	b.ReportMetric(mb/replayed.cpu.Seconds(), "replay-MB/s")
	b.ReportMetric(events/replayed.cpu.Seconds(), "replay-events/s")
	b.ReportMetric(decode.cpu.Seconds()/replayed.cpu.Seconds()*100, "replay-%-of-decode")
	b.ReportMetric(decode.wall.Seconds()/replayed.wall.Seconds()*100, "replay-%-of-decode-by-clock")
}

// timer adds up the CPU time of the process and the clock time of passes.
type timer struct{ cpu, wall time.Duration }

func (t *timer) time(b *testing.B, pass func()) {
	cpu0, wall0 := processCPU(b), time.Now()
	pass()
	t.wall += time.Since(wall0)
	t.cpu += processCPU(b) - cpu0
}

// processCPU is the CPU time used so far by all threads of the process.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type segment struct {
	first int64 // seq of the segment's first event
	data  []byte
}

// turnSegments cuts a log after the first turn/end at or past every n events.
func turnSegments(b *testing.B, data []byte, n int) []segment {
	var segs []segment
	start, offset := 0, 0
	first := int64(0)
	for e, err := range turnlog.NewReader(bytes.NewReader(data)).All() {
		if err != nil {
			b.Fatal(err)
		}
		offset += len(e.Raw) + 1
		if e.Type == turnlog.TypeTurnEnd && e.Seq-first+1 >= int64(n) {
			segs = append(segs, segment{first: first, data: data[start:offset]})
			start, first = offset, e.Seq+1
		}
	}
	if start < len(data) {
		segs = append(segs, segment{first: first, data: data[start:]})
	}
	return segs
}
