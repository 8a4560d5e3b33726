package replay_test

import (
	"bytes"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/turnlog/turnlogtest"
)

// BenchmarkReplay replays a generated 100,000-event log side by side with a
// decode-only pass over the same bytes (the validating Reader alone), which
// is the floor replay cannot beat.
func BenchmarkReplay(b *testing.B) {
	data := turnlogtest.Log(100_000, 1)
	events := int64(bytes.Count(data, []byte("\n")))
	report := func(b *testing.B) {
		b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	}
	b.Run("decode-only", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			r := turnlog.NewReader(bytes.NewReader(data))
			for {
				if _, err := r.Next(); err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
		}
		report(b)
	})
	b.Run("replay", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			res, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(data)), replay.Options{Through: replay.Head})
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
// runs the decode-only pass and the replay over each segment in turn, timing
// each separately, so load from elsewhere on the machine falls on both alike.
// A collection before each timed pass keeps one pass's garbage from being
// collected on the other's clock.
func BenchmarkReplayInterleaved(b *testing.B) {
	data := turnlogtest.Log(100_000, 1)
	segments := turnSegments(b, data, 1000)
	decodeSegment := func(b *testing.B, seg segment, add func(e *turnlog.Event)) {
		r := turnlog.NewReaderWith(bytes.NewReader(seg.data), turnlog.NewValidatorAt(seg.first))
		for {
			e, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				b.Fatal(err)
			}
			add(&e)
		}
	}
	var decodeTime, replayTime time.Duration
	for b.Loop() {
		builder := replay.NewBuilder(replay.Options{Through: replay.Head})
		for _, seg := range segments {
			runtime.GC()
			t0 := time.Now()
			decodeSegment(b, seg, func(*turnlog.Event) {})
			decodeTime += time.Since(t0)
			runtime.GC()
			t1 := time.Now()
			decodeSegment(b, seg, builder.Add)
			replayTime += time.Since(t1)
		}
		t0 := time.Now()
		if res := builder.Result(); res.Counts.Native == 0 {
			b.Fatal("nothing replayed native")
		}
		replayTime += time.Since(t0)
	}
	mb := float64(len(data)) * float64(b.N) / 1e6
	b.ReportMetric(mb/decodeTime.Seconds(), "decode-only-MB/s")
	b.ReportMetric(mb/replayTime.Seconds(), "replay-MB/s")
	b.ReportMetric(decodeTime.Seconds()/replayTime.Seconds()*100, "replay-%-of-decode")
}

type segment struct {
	first int64 // seq of the segment's first event
	data  []byte
}

// turnSegments cuts a log after the first turn/end at or past every n events.
func turnSegments(b *testing.B, data []byte, n int) []segment {
	var segs []segment
	r := turnlog.NewReader(bytes.NewReader(data))
	start, offset := 0, 0
	first := int64(0)
	for {
		e, err := r.Next()
		if err == io.EOF {
			break
		}
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
