package sessionlog_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
)

// lastTurnsWant is what LastTurns must yield, from the whole log: the
// seqs from the n-th last turn/start before before up to before-1, or from
// 0 when there are fewer.
func lastTurnsWant(all []sessionlog.Event, before int64, n int) []int64 {
	end := min(before, int64(len(all)))
	start, seen := int64(0), 0
	for i := end - 1; i >= 0; i-- {
		if all[i].Type == "turn/start" {
			if seen++; seen == n {
				start = i
				break
			}
		}
	}
	var want []int64
	for s := start; s < end; s++ {
		want = append(want, s)
	}
	return want
}

// Every window of the last turns, over segments that hold several turns,
// a turn split over segments, events between turns and an open last turn,
// is the run of seqs it should be, and checks out as events.
func TestLastTurns(t *testing.T) {
	lg := openLog(t, storetest.Open(t, "mem://", nil), loc)
	a := lg.NewAppender("")
	batches := [][][]byte{
		{ev("session/start", 0, ""), ev("turn/start", 1, ""), ev("user/message", 1, `,"content":"a"`), ev("turn/end", 1, `,"reason":"stop"`),
			ev("turn/start", 2, ""), ev("user/message", 2, `,"content":"b"`), ev("turn/end", 2, `,"reason":"stop"`)},
		{ev("turn/start", 3, ""), ev("user/message", 3, `,"content":"c"`)},
		{ev("turn/end", 3, `,"reason":"stop"`)},
		{[]byte(`{"type":"system/message","content":"between"}`), ev("turn/start", 5, ""), ev("turn/end", 5, `,"reason":"aborted"`),
			ev("turn/start", 6, ""), ev("turn/end", 6, `,"reason":"stop"`)},
		{ev("turn/start", 7, ""), ev("user/message", 7, `,"content":"d"`)},
	}
	for _, b := range batches {
		if _, err := a.Append(ctx(t), b...); err != nil {
			t.Fatal(err)
		}
	}
	all := readAll(t, lg)
	for before := int64(0); before <= int64(len(all))+1; before++ {
		for n := 1; n <= 7; n++ {
			var got []int64
			for e, err := range lg.LastTurnEvents(ctx(t), before, n) {
				if err != nil {
					t.Fatalf("LastTurnEvents(%d, %d): %v", before, n, err)
				}
				got = append(got, e.Seq)
			}
			if want := lastTurnsWant(all, before, n); !slices.Equal(got, want) {
				t.Errorf("LastTurns(%d, %d) = %v, want %v", before, n, got, want)
			}
		}
	}
	for _, err := range lg.LastTurns(ctx(t), math.MaxInt64, 0) {
		if err == nil {
			t.Error("LastTurns of 0 turns yielded an event, want an error")
		}
	}
}

// The last turns of a long log are read from its last segments alone.
func TestLastTurnsReadsOnlyTheirSegments(t *testing.T) {
	c := storetest.NewCounting(storetest.Open(t, "mem://", nil))
	lg := openLog(t, c, loc)
	writeTurns(t, lg, 40, 8, false) // 40 segments of one turn each
	for _, n := range []int{1, 3, 40, 50} {
		c.Reset()
		count := 0
		for _, err := range lg.LastTurns(ctx(t), math.MaxInt64, n) {
			if err != nil {
				t.Fatal(err)
			}
			count++
		}
		turns := min(n, 40)
		if count != turns*10 {
			t.Errorf("the last %d turns: %d events, want %d", n, count, turns*10)
		}
		if got := c.Counts().RangeReads; got != int64(turns) {
			t.Errorf("the last %d turns read %d segments, want %d", n, got, turns)
		}
	}
	c.Reset()
	for e, err := range lg.LastTurns(ctx(t), 200, 2) {
		if err != nil || e.Seq < 180 || e.Seq >= 200 {
			t.Fatal(fmt.Sprint("before 200: ", e.Seq, err))
		}
	}
	if got := c.Counts().RangeReads; got != 2 {
		t.Errorf("two turns before seq 200 read %d segments, want 2", got)
	}
}
