package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"runtime"
	"testing"
	"time"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
)

// longSession is a stored Session of turns turns of a pi session.
func longSession(t testing.TB, turns int) *storedSession {
	t.Helper()
	pi, err := agenthost.ReadPiSession(bytes.NewReader(loggen.LongPiSession(turns)), "long.jsonl", "")
	if err != nil {
		t.Fatal(err)
	}
	return newStoredSession(t, pi.Events)
}

// nextTurn is one more turn of a live Session: a question and a streamed
// answer.
func nextTurn(turn int64) []agenthost.Event {
	return []agenthost.Event{
		agenthost.TurnStart(turn), agenthost.UserText(turn, fmt.Sprintf("Turn %d, live.", turn)),
		agenthost.ResponseStart(turn, 0, loggen.Adapter), agenthost.TextDelta(turn, 0, 0, "Answered live."),
		agenthost.ResponseFinish(turn, 0, agenthost.StopReasonStop, nil, nil), agenthost.TurnEnd(turn, agenthost.StopReasonStop),
	}
}

// appendLive appends a turn as a host does, then replays it.
func (s *storedSession) appendLive(turn int64) {
	s.t.Helper()
	s.turns = append(s.turns, nextTurn(turn))
	s.write(1)
	s.replay()
}

// resetCounts forgets what was read so far.
func (s *storedSession) resetCounts() {
	s.count.Reset()
	s.reads.segments()
}

// storedBytes is the size of everything stored for the Session.
func (s *storedSession) storedBytes() int64 {
	var n int64
	for o, err := range s.count.Bucket.List(context.Background(), "") {
		if err != nil {
			s.t.Fatal(err)
		}
		n += o.Size
	}
	return n
}

// A window of a long Session written a turn at a time, as a host writes
// it, reads the segments of its turns and no other; a live update reads
// the new turn's segment, and the new transcript part once the turn is
// replayed, and no other part.
func TestWindowReadsOnlyItsTurns(t *testing.T) {
	s := longSession(t, 300)
	for len(s.turns) > 0 {
		s.write(1)
		if len(s.turns)%25 == 0 {
			s.replay()
		}
	}
	stored := s.storedBytes()
	read := func(what string, query url.Values, wantSegments, wantParts int, share int64) conversation {
		t.Helper()
		s.resetCounts()
		c := s.window(query)
		segments, parts := s.reads.segments()
		if bytes := s.count.Counts().BytesRead; segments != wantSegments || parts > wantParts || bytes*share > stored {
			t.Errorf("%s read %d segments, %d transcript parts and %d of the %d bytes stored; want %d segments, at most %d parts and 1/%d of the bytes",
				what, segments, parts, bytes, stored, wantSegments, wantParts, share)
		}
		return c
	}
	last := read("the last 5 turns", url.Values{"limit": {"5"}}, 5, 2, 10)
	if n := len(last.Turns); n != 5 {
		t.Fatalf("the last window has %d turns, want 5", n)
	}
	earlier := read("the 5 turns before", url.Values{"limit": {"5"}, "before": {last.Earlier}}, 5, 2, 10)
	if len(earlier.Turns) != 5 || earlier.To+1 != last.From {
		t.Errorf("the 5 turns before: %d turns to seq %d, want 5 to %d", len(earlier.Turns), earlier.To, last.From-1)
	}

	// A turn appended, not replayed yet: its segment, and no part.
	s.turns = append(s.turns, nextTurn(301))
	s.write(1)
	appended := read("a live update before replay", url.Values{"from": {last.Refresh}}, 1, 0, 100)
	s.replay()
	update := read("a live update after replay", url.Values{"from": {appended.Refresh}}, 1, 1, 100)
	if len(update.Turns) != 1 || update.Turns[0].Turn != 301 || len(update.Turns[0].Entries) != 2 {
		t.Errorf("a live update brought %+v, want turn 301 alone, its question and answer", update.Turns)
	}
	if idle := read("an update with nothing new", url.Values{"from": {update.Refresh}}, 1, 0, 100); len(idle.Turns) != 0 {
		t.Errorf("an update with nothing new brought %+v", idle.Turns)
	}
}

// BenchmarkLongSession: the 10,000-turn pi session of the report that the
// page took 27.9 s to show (loggen.LongPiSession: ~40,000 context
// messages), imported at once and replayed in one run, then read as the
// page read it before (the whole raw log and the whole stored transcript,
// in one answer) and as it reads it now: the last 50 turns, the 50 before
// them, and a live update after one more turn. Each op is a load of the
// last 50 turns; it reports, measured in the same run, the bytes read from
// the store and the size of the answer of each, and the heap allocated.
//
//	go test ./cmd/internal/ui -run '^$' -bench BenchmarkLongSession -benchtime 20x
func BenchmarkLongSession(b *testing.B) {
	s := longSession(b, 10000)
	s.write(-1)
	s.replay()
	stored := s.storedBytes()

	measure := func(f func() int) (read, answer, alloc int64, took time.Duration) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s.count.Reset()
		start := time.Now()
		n := f()
		took = time.Since(start)
		runtime.ReadMemStats(&after)
		return s.count.Counts().BytesRead, int64(n), int64(after.TotalAlloc - before.TotalAlloc), took
	}
	wholeRead, wholeAnswer, wholeAlloc, wholeTook := measure(func() int {
		data, err := json.Marshal(s.whole())
		if err != nil {
			b.Fatal(err)
		}
		return len(data)
	})
	var last conversation
	lastRead, lastAnswer, lastAlloc, _ := measure(func() int {
		var meta sessionPage
		return s.get("/api/sessions/default/long", &meta) + s.get("/api/sessions/default/long/turns", &last)
	})
	earlierRead, earlierAnswer, _, _ := measure(func() int {
		var c conversation
		return s.get("/api/sessions/default/long/turns?before="+url.QueryEscape(last.Earlier), &c)
	})
	s.appendLive(10001)
	var update conversation
	updateRead, updateAnswer, _, _ := measure(func() int {
		return s.get("/api/sessions/default/long/turns?from="+url.QueryEscape(last.Refresh), &update)
	})
	if len(update.Turns) != 1 {
		b.Fatalf("the live update brought %d turns, want 1", len(update.Turns))
	}

	b.ResetTimer()
	for range b.N {
		var c conversation
		s.get("/api/sessions/default/long/turns", &c)
	}
	b.StopTimer()
	mb := func(n int64) float64 { return float64(n) / (1 << 20) }
	kb := func(n int64) float64 { return float64(n) / (1 << 10) }
	b.ReportMetric(mb(stored), "stored-MiB")
	b.ReportMetric(mb(wholeRead), "before-read-MiB")
	b.ReportMetric(mb(wholeAnswer), "before-answer-MiB")
	b.ReportMetric(mb(wholeAlloc), "before-alloc-MiB")
	b.ReportMetric(wholeTook.Seconds(), "before-s")
	b.ReportMetric(kb(lastRead), "last-read-KiB")
	b.ReportMetric(kb(lastAnswer), "last-answer-KiB")
	b.ReportMetric(mb(lastAlloc), "last-alloc-MiB")
	b.ReportMetric(kb(earlierRead), "earlier-read-KiB")
	b.ReportMetric(kb(earlierAnswer), "earlier-answer-KiB")
	b.ReportMetric(kb(updateRead), "update-read-KiB")
	b.ReportMetric(kb(updateAnswer), "update-answer-KiB")
}
