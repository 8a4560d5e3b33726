package sessionlog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// backend opens a fresh bucket for a test.
type backend struct {
	name string
	open func(t testing.TB) store.Bucket
	// appends is how many appends each of 16 concurrent appenders makes.
	// 16 appenders racing for the head lose about 15 races per seq, and
	// each loss costs a create and a read. On a 2-core machine 16×1,000
	// takes ~15 s on mem but ~90 s on file (every create syncs a file) and
	// far longer against versitygw (every request is HTTP), so those run
	// fewer appends; the races they exercise are the same.
	appends int
}

var backends = []backend{
	{"mem", func(t testing.TB) store.Bucket { return storetest.Open(t, "mem://", nil) }, 1000},
	{"file", func(t testing.TB) store.Bucket { return storetest.Open(t, "file://"+t.TempDir(), nil) }, 250},
	{"versitygw", func(t testing.TB) store.Bucket {
		srv := versitygw.Start(t)
		return storetest.Open(t, srv.URL, srv.Options())
	}, 40},
}

var loc = sessionlog.Location{Prefix: "sessions", Namespace: "default", Session: "chat", UID: "6b1f0c2e-uid"}

func openLog(t testing.TB, b store.Bucket, l sessionlog.Location) *sessionlog.Log {
	t.Helper()
	lg, err := sessionlog.New(b).Log(l)
	if err != nil {
		t.Fatal(err)
	}
	return lg
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return c
}

// readAll returns the log's events, failing the test on any error.
func readAll(t testing.TB, lg *sessionlog.Log) []sessionlog.Event {
	t.Helper()
	var out []sessionlog.Event
	for e, err := range lg.Read(ctx(t), 0, math.MaxInt64) {
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		out = append(out, e)
	}
	return out
}

func ev(typ string, turn int, extra string) []byte {
	return fmt.Appendf(nil, `{"type":%q,"turn":%d%s}`, typ, turn, extra)
}

// TestConcurrentAppenders has 16 appenders append at once, each append a
// batch of 1–3 events, and checks that the log is dense, holds every event
// exactly once, and holds each acknowledged batch at the seq it was
// acknowledged at — with and without injected faults.
func TestConcurrentAppenders(t *testing.T) {
	for _, be := range backends {
		for _, faulty := range []bool{false, true} {
			name := be.name
			if faulty {
				name += "/faults"
			}
			t.Run(name, func(t *testing.T) {
				if faulty && be.name == "file" {
					t.Skip("the fault wrapper is backend-independent; mem and versitygw cover it")
				}
				var b store.Bucket = be.open(t)
				var f *storetest.Faulty
				if faulty {
					f = storetest.NewFaulty(b, 42, storetest.Rates{TimeoutAfterSuccess: 0.04, Conflict: 0.04, PreconditionFailed: 0.04, Unavailable: 0.04})
					b = f
				}
				runConcurrentAppenders(t, b, 16, be.appends)
				if f != nil {
					got := f.Injected()
					for _, k := range []storetest.Fault{storetest.TimeoutAfterSuccess, storetest.Conflict, storetest.PreconditionFailed, storetest.Unavailable} {
						if got[k] == 0 {
							t.Errorf("no %v fault was injected: the test proved nothing about it", k)
						}
					}
					t.Logf("faults injected: %v", got)
				}
			})
		}
	}
}

func runConcurrentAppenders(t *testing.T, b store.Bucket, writers, appends int) {
	lg := openLog(t, b, loc)
	type ack struct {
		first int64
		n     int
	}
	acks := make([][]ack, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			a := lg.NewAppender(fmt.Sprintf("w%d", w))
			for i := range appends {
				n := 1 + (w+i)%3
				batch := make([][]byte, n)
				for j := range batch {
					batch[j] = ev("chunk", 1, fmt.Sprintf(`,"w":%d,"i":%d,"j":%d`, w, i, j))
				}
				first, err := a.Append(ctx(t), batch...)
				if err != nil {
					errs <- fmt.Errorf("writer %d append %d: %w", w, i, err)
					return
				}
				acks[w] = append(acks[w], ack{first, n})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d appenders × %d appends in %v", writers, appends, time.Since(start).Round(time.Millisecond))

	events := readAll(t, lg)
	type id struct{ w, i, j int }
	at := map[id]int64{}
	for k, e := range events {
		if e.Seq != int64(k) {
			t.Fatalf("event %d has seq %d: seqs are not dense", k, e.Seq)
		}
		var v struct{ W, I, J int }
		if err := json.Unmarshal(e.Line, &v); err != nil {
			t.Fatal(err)
		}
		if prev, dup := at[id{v.W, v.I, v.J}]; dup {
			t.Fatalf("event w%d/%d/%d stored twice, at seqs %d and %d", v.W, v.I, v.J, prev, e.Seq)
		}
		at[id{v.W, v.I, v.J}] = e.Seq
	}
	total := 0
	for w, as := range acks {
		for i, a := range as {
			for j := range a.n {
				seq, ok := at[id{w, i, j}]
				if !ok {
					t.Fatalf("acknowledged event w%d/%d/%d is missing", w, i, j)
				}
				if seq != a.first+int64(j) {
					t.Fatalf("event w%d/%d/%d acknowledged at seq %d, stored at %d", w, i, j, a.first+int64(j), seq)
				}
				total++
			}
		}
	}
	if len(events) != total {
		t.Fatalf("log holds %d events, %d were acknowledged", len(events), total)
	}
	h, err := lg.Head(ctx(t))
	if err != nil || h.Next != int64(total) {
		t.Fatalf("Head = %+v, %v; want Next %d", h, err, total)
	}
}

// TestAmbiguousWriteIsNotRepeated: the first write lands but its answer is
// lost; the retry must recognise it instead of storing the batch again.
func TestAmbiguousWriteIsNotRepeated(t *testing.T) {
	mem := storetest.Open(t, "mem://", nil)
	f := storetest.NewFaulty(mem, 1, storetest.Rates{})
	lg := openLog(t, f, loc)
	a := lg.NewAppender("host-1")
	f.Script(storetest.TimeoutAfterSuccess, storetest.Unavailable, storetest.TimeoutAfterSuccess)
	first, err := a.Append(ctx(t), ev("turn/start", 1, ""))
	if err != nil || first != 0 {
		t.Fatalf("Append = %d, %v; want 0, nil", first, err)
	}
	first, err = a.Append(ctx(t), ev("user/message", 1, `,"content":[]`))
	if err != nil || first != 1 {
		t.Fatalf("second Append = %d, %v; want 1, nil", first, err)
	}
	if got := readAll(t, lg); len(got) != 2 {
		t.Fatalf("log holds %d events, want 2", len(got))
	}
}

// TestLandedWriteIsRecognised: a write lands, but the caller hears
// "exists" (a library's own retry of it) or an error nothing classifies.
// Neither may make an owner think another writer took its place, nor store
// the batch twice when it is appended again.
func TestLandedWriteIsRecognised(t *testing.T) {
	for _, fault := range []storetest.Fault{storetest.ExistsAfterSuccess, storetest.BrokenAfterSuccess} {
		t.Run(fault.String(), func(t *testing.T) {
			f := storetest.NewFaulty(storetest.Open(t, "mem://", nil), 1, storetest.Rates{})
			lg := openLog(t, f, loc)
			a := lg.NewAppender("host-1")
			if err := a.AppendAt(ctx(t), 0, ev("turn/start", 1, "")); err != nil {
				t.Fatal(err)
			}
			f.Script(fault)
			batch := [][]byte{ev("user/message", 1, `,"content":[]`), ev("turn/end", 1, `,"reason":"stop"`)}
			err := a.AppendAt(ctx(t), 1, batch...)
			if err != nil {
				if !errors.Is(err, sessionlog.ErrOutcomeUnknown) {
					t.Fatalf("AppendAt after a write that landed = %v, want nil or ErrOutcomeUnknown", err)
				}
				if err := a.AppendAt(ctx(t), 1, batch...); err != nil {
					t.Fatalf("retrying the batch whose write landed: %v", err)
				}
			}
			if err := a.AppendAt(ctx(t), 3, ev("turn/start", 2, "")); err != nil {
				t.Fatalf("the next append: %v", err)
			}
			if got := readAll(t, lg); len(got) != 4 {
				t.Fatalf("log holds %d events, want 4", len(got))
			}
		})
	}
}

// TestAppendReportsUnknownOutcome: an append that gives up after 503s
// cannot know whether a write landed, and must say so.
func TestAppendReportsUnknownOutcome(t *testing.T) {
	mem := storetest.Open(t, "mem://", nil)
	f := storetest.NewFaulty(mem, 1, storetest.Rates{Unavailable: 1})
	a := openLog(t, f, loc).NewAppender("")
	c, cancel := context.WithTimeout(ctx(t), 200*time.Millisecond)
	defer cancel()
	_, err := a.Append(c, ev("turn/start", 1, ""))
	if !errors.Is(err, sessionlog.ErrOutcomeUnknown) {
		t.Fatalf("Append that only got 503s = %v, want ErrOutcomeUnknown", err)
	}
	// A failure before any write is not ambiguous.
	if _, err := a.Append(ctx(t), []byte(`{"type":"x","seq":1}`)); err == nil || errors.Is(err, sessionlog.ErrOutcomeUnknown) {
		t.Fatalf("Append of an invalid event = %v, want a plain error", err)
	}
}

func TestStaleWriter(t *testing.T) {
	lg := openLog(t, storetest.Open(t, "mem://", nil), loc)
	a, b := lg.NewAppender("a"), lg.NewAppender("b")
	if err := a.AppendAt(ctx(t), 0, ev("turn/start", 1, ""), ev("user/message", 1, "")); err != nil {
		t.Fatal(err)
	}
	for _, expect := range []int64{0, 1, 5} {
		err := b.AppendAt(ctx(t), expect, ev("turn/start", 1, ""))
		var se *sessionlog.StaleWriterError
		if !errors.Is(err, sessionlog.ErrStaleWriter) || !errors.As(err, &se) || se.Next != 2 || se.Expected != expect {
			t.Fatalf("AppendAt(%d) on a log of 2 events = %v, want a stale-writer error with next seq 2", expect, err)
		}
	}
	if err := b.AppendAt(ctx(t), 2, ev("turn/end", 1, `,"reason":"stop"`)); err != nil {
		t.Fatalf("AppendAt at the real head: %v", err)
	}
	// a last saw the head at 2; b moved it.
	if err := a.AppendAt(ctx(t), 2, ev("turn/start", 2, "")); !errors.Is(err, sessionlog.ErrStaleWriter) {
		t.Fatalf("AppendAt by a writer that missed an append = %v, want ErrStaleWriter", err)
	}
	if got := readAll(t, lg); len(got) != 3 {
		t.Fatalf("log holds %d events, want 3", len(got))
	}
}

func TestAppendRejectsBadEvents(t *testing.T) {
	mem := storetest.Open(t, "mem://", nil)
	a := openLog(t, mem, loc).NewAppender("")
	for _, bad := range []string{`{"type":"x"`, `[1]`, `"s"`, `{"seq":3,"type":"x"}`, `{"seq":null,"type":"x"}`, `{"type":"x","turn":"one"}`, `{"turn":1}`, ``} {
		if _, err := a.Append(ctx(t), []byte(bad)); err == nil {
			t.Errorf("Append(%s) succeeded", bad)
		}
	}
	if _, err := a.Append(ctx(t)); err == nil {
		t.Errorf("Append of no events succeeded")
	}
	for o, err := range mem.List(ctx(t), "") {
		t.Fatalf("a rejected append wrote %v (%v)", o.Key, err)
	}
}

// TestEventsRoundTrip: events come back as written (compacted, with a seq
// in front), unknown fields and types included.
func TestEventsRoundTrip(t *testing.T) {
	lg := openLog(t, storetest.Open(t, "mem://", nil), loc)
	a := lg.NewAppender("")
	in := "{\n  \"type\": \"vendor/thing\", \"turn\": 1,\n  \"x\": {\"nested\": [1, 2]} }"
	if _, err := a.Append(ctx(t), []byte(in)); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, lg)
	want := `{"seq":0,"type":"vendor/thing","turn":1,"x":{"nested":[1,2]}}`
	if len(got) != 1 || string(got[0].Line) != want {
		t.Fatalf("read back %v, want %s", got, want)
	}
}

// TestEventsStopAtABrokenEvent: Events yields the events before a broken
// one, then the problem, once, named by its seq as a *turnlog.LineError,
// and nothing after it.
func TestEventsStopAtABrokenEvent(t *testing.T) {
	for _, c := range []struct {
		name, broken, want string
	}{
		{"turn structure", string(ev("turn/end", 1, `,"reason":"stop"`)), "seq 2: turn/end with no open turn"},
		{"a field", string(ev("user/message", 1, `,"content":5`)), `seq 2: field "content": want an array of blocks, a string or null, got a number`},
	} {
		t.Run(c.name, func(t *testing.T) {
			lg := openLog(t, storetest.Open(t, "mem://", nil), loc)
			if _, err := lg.NewAppender("").Append(ctx(t), ev("turn/start", 1, ""), ev("turn/end", 1, `,"reason":"stop"`), []byte(c.broken), ev("turn/start", 2, "")); err != nil {
				t.Fatal(err)
			}
			var seqs []int64
			var problems []string
			for e, err := range lg.Events(ctx(t), 0, math.MaxInt64) {
				if err != nil {
					if _, ok := errors.AsType[*turnlog.LineError](err); !ok {
						t.Errorf("%v is not a *turnlog.LineError", err)
					}
					problems = append(problems, err.Error())
					continue
				}
				seqs = append(seqs, e.Seq)
			}
			if fmt.Sprint(seqs) != "[0 1]" || len(problems) != 1 || problems[0] != c.want {
				t.Errorf("read seqs %v, then %q; want [0 1], then %q", seqs, problems, c.want)
			}
		})
	}
}

// writeTurns appends turns turns, each with k chunks, one segment per event
// when perEvent, and returns all events as appended.
func writeTurns(t testing.TB, lg *sessionlog.Log, turns, k int, perEvent bool) {
	t.Helper()
	a := lg.NewAppender("")
	for turn := 1; turn <= turns; turn++ {
		evs := [][]byte{ev("turn/start", turn, "")}
		for c := range k {
			evs = append(evs, ev("chunk", turn, fmt.Sprintf(`,"response":0,"block":0,"delta":{"type":"text","text":"c%d"}`, c)))
		}
		evs = append(evs, ev("turn/end", turn, `,"reason":"stop"`))
		if perEvent {
			for _, e := range evs {
				if _, err := a.Append(ctx(t), e); err != nil {
					t.Fatal(err)
				}
			}
		} else if _, err := a.Append(ctx(t), evs...); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHead(t *testing.T) {
	c := storetest.NewCounting(storetest.Open(t, "mem://", nil))
	lg := openLog(t, c, loc)
	h, err := lg.Head(ctx(t))
	if err != nil || h.Next != 0 || h.Head() != -1 || h.LastTurnEnd != nil {
		t.Fatalf("Head of an empty log = %+v, %v", h, err)
	}
	writeTurns(t, lg, 30, 5, false) // 30 segments of 7 events
	c.Reset()
	h, err = lg.Head(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := sessionlog.HeadInfo{Next: 210, Turns: 30, Segments: 30, LastTurnEnd: &sessionlog.TurnEnd{Seq: 209, Turn: 30, Reason: "stop"}}
	if h.Next != want.Next || h.Turns != want.Turns || h.TurnOpen || h.Segments != 30 || *h.LastTurnEnd != *want.LastTurnEnd {
		t.Fatalf("Head = %+v (last turn end %+v), want %+v", h, h.LastTurnEnd, want)
	}
	if got := c.Counts(); got.RangeReads != 1 || got.Requests() != 2 {
		t.Fatalf("Head made %+v; want one list and one read of the last segment", got)
	}

	// An open turn spread over several segments: Head reads back to the
	// previous turn's end.
	a := lg.NewAppender("")
	for _, e := range [][]byte{ev("turn/start", 31, ""), ev("chunk", 31, ""), ev("chunk", 31, "")} {
		if _, err := a.Append(ctx(t), e); err != nil {
			t.Fatal(err)
		}
	}
	c.Reset()
	h, err = lg.Head(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if h.Next != 213 || h.Turns != 31 || !h.TurnOpen || h.LastTurnEnd.Seq != 209 {
		t.Fatalf("Head with an open turn = %+v", h)
	}
	if got := c.Counts(); got.RangeReads != 4 {
		t.Fatalf("Head read %d segments, want 4 (3 of the open turn, 1 with the last turn/end)", got.RangeReads)
	}
}

func TestReadRanges(t *testing.T) {
	c := storetest.NewCounting(storetest.Open(t, "mem://", nil))
	lg := openLog(t, c, loc)
	writeTurns(t, lg, 10, 8, false) // 10 segments of 10 events
	for _, r := range []struct{ from, through, want int64 }{
		{0, 0, 1}, {0, 9, 10}, {5, 14, 10}, {37, 37, 1}, {95, 1000, 5}, {100, 200, 0}, {0, math.MaxInt64, 100},
	} {
		c.Reset()
		var seqs []int64
		for e, err := range lg.Read(ctx(t), r.from, r.through) {
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, e.Seq)
		}
		if int64(len(seqs)) != r.want || (len(seqs) > 0 && seqs[0] != r.from) {
			t.Fatalf("Read(%d, %d) = %v, want %d events from %d", r.from, r.through, seqs, r.want, r.from)
		}
		// Only the segments holding the range are read.
		segments := (min(r.through, 99)/10 - min(r.from, 99)/10) + 1
		if got := c.Counts().RangeReads; got != segments {
			t.Fatalf("Read(%d, %d) read %d segments, want %d", r.from, r.through, got, segments)
		}
	}
	for _, bad := range [][2]int64{{-1, 3}, {5, 4}} {
		for _, err := range lg.Read(ctx(t), bad[0], bad[1]) {
			if err == nil {
				t.Fatalf("Read(%d, %d) yielded an event, want an error", bad[0], bad[1])
			}
		}
	}
}

// TestBadData: damage in the bucket gives one-line errors naming the object,
// line and seq.
func TestBadData(t *testing.T) {
	for _, c := range []struct {
		name    string
		objects map[string]string
		want    string
	}{
		{"invalid JSON", map[string]string{"00000000000000000000": `{"seq":0,"type":"a"}` + "\n" + `{"seq":1,"type":` + "\n"},
			"log/00000000000000000000.jsonl line 2 (seq 1): invalid JSON"},
		{"wrong seq", map[string]string{"00000000000000000000": `{"seq":0,"type":"a"}` + "\n" + `{"seq":7,"type":"a"}` + "\n"},
			"log/00000000000000000000.jsonl line 2 (seq 1): seq is 7"},
		{"no type", map[string]string{"00000000000000000000": `{"seq":0}` + "\n"},
			"log/00000000000000000000.jsonl line 1 (seq 0): no type"},
		{"truncated", map[string]string{"00000000000000000000": `{"seq":0,"type":"a"}`},
			"log/00000000000000000000.jsonl line 1 (seq 0): truncated"},
		{"gap", map[string]string{"00000000000000000000": `{"seq":0,"type":"a"}` + "\n", "00000000000000000002": `{"seq":2,"type":"a"}` + "\n"},
			"log/00000000000000000002.jsonl: gap: the previous segment ends at seq 0"},
		{"stray object", map[string]string{"notes": "hi"},
			"log/notes: not a segment name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := storetest.Open(t, "mem://", nil)
			lg := openLog(t, mem, loc)
			for name, data := range c.objects {
				key := "sessions/default/chat/6b1f0c2e-uid/log/" + name
				if name != "notes" {
					key += ".jsonl"
				}
				if err := mem.PutIfAbsent(ctx(t), key, []byte(data), nil); err != nil {
					t.Fatal(err)
				}
			}
			var readErr error
			for _, err := range lg.Read(ctx(t), 0, math.MaxInt64) {
				readErr = err
			}
			_, headErr := lg.Head(ctx(t))
			for _, err := range []error{readErr, headErr} {
				var de *sessionlog.DataError
				if !errors.As(err, &de) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("error = %v, want a one-line DataError containing %q", err, c.want)
				}
			}
		})
	}
}

func TestCopyPrefix(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			c := storetest.NewCounting(be.open(t))
			s := sessionlog.New(c)
			src := openLog(t, c, loc)
			// Segments of 10 events each: seqs 0–9, 10–19, … 90–99, then a
			// segment of one event (100).
			writeTurns(t, src, 10, 8, false)
			if _, err := src.NewAppender("").Append(ctx(t), ev("turn/start", 11, "")); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, c, "sessions/default/chat/")
			all := readAll(t, src)

			for _, cs := range []struct {
				cut                   int64
				copies, reads, writes int64
			}{
				{cut: 9, copies: 1},              // one segment, at a boundary: copied inside the service
				{cut: 49, reads: 5, writes: 1},   // small segments: merged into one
				{cut: 55, reads: 7, writes: 2},   // inside a segment: the merged five, a scan, then the lines through the cut
				{cut: 0, reads: 2, writes: 1},    // the first event
				{cut: 100, reads: 12, writes: 1}, // the last event, the end of its segment: a scan, then all eleven merged
			} {
				dst := sessionlog.Location{Prefix: "sessions", Namespace: "default", Session: fmt.Sprintf("fork-%d", cs.cut), UID: "u2"}
				c.Reset()
				if err := s.CopyPrefix(ctx(t), loc, dst, cs.cut); err != nil {
					t.Fatalf("cut %d: %v", cs.cut, err)
				}
				got := c.Counts()
				if got.Copies != cs.copies || got.Gets+got.RangeReads != cs.reads || got.Creates != cs.writes || got.Puts != 0 {
					t.Errorf("cut %d: %d copies, %d reads, %d creates, %d puts; want %d, %d, %d, 0",
						cs.cut, got.Copies, got.Gets+got.RangeReads, got.Creates, got.Puts, cs.copies, cs.reads, cs.writes)
				}
				if cs.reads == 0 && got.BytesRead+got.BytesWritten != 0 {
					t.Errorf("cut %d copied inside the service but moved %d bytes through the process", cs.cut, got.BytesRead+got.BytesWritten)
				}
				child := readAll(t, openLog(t, c, dst))
				if int64(len(child)) != cs.cut+1 {
					t.Fatalf("cut %d: child has %d events, want %d", cs.cut, len(child), cs.cut+1)
				}
				for i := range child {
					if !bytes.Equal(child[i].Line, all[i].Line) {
						t.Fatalf("cut %d: child event %d = %s, source has %s", cs.cut, i, child[i].Line, all[i].Line)
					}
				}
				// Running it again completes nothing new and fails nothing.
				if err := s.CopyPrefix(ctx(t), loc, dst, cs.cut); err != nil {
					t.Fatalf("cut %d: repeated copy: %v", cs.cut, err)
				}
				// The child goes on from the cut.
				if first, err := openLog(t, c, dst).NewAppender("").Append(ctx(t), ev("turn/start", 99, "")); err != nil || first != cs.cut+1 {
					t.Fatalf("cut %d: child append = %d, %v; want %d", cs.cut, first, err, cs.cut+1)
				}
			}
			after := snapshot(t, c, "sessions/default/chat/")
			if len(after) != len(before) {
				t.Fatalf("source has %d objects after copying, %d before", len(after), len(before))
			}
			for k, v := range before {
				if !bytes.Equal(after[k], v) {
					t.Fatalf("source object %s changed", k)
				}
			}

			dst := sessionlog.Location{Prefix: "sessions", Namespace: "default", Session: "fork-9", UID: "u2"}
			if err := s.CopyPrefix(ctx(t), loc, dst, 19); !errors.Is(err, sessionlog.ErrDestinationNotEmpty) {
				t.Errorf("copy into a used log = %v, want ErrDestinationNotEmpty", err)
			}
			dst.Session = "fork-far"
			if err := s.CopyPrefix(ctx(t), loc, dst, 101); !errors.Is(err, sessionlog.ErrBeyondHead) {
				t.Errorf("copy past the head = %v, want ErrBeyondHead", err)
			}
		})
	}
}

// slowCopies delays each copy and create into a fork's log, the one of
// seq 50 longest, so that with copies running at once the later ones land
// before it; after each it calls landed.
type slowCopies struct {
	store.Bucket
	under  string
	landed func()
}

func (b *slowCopies) delay(key string) {
	if !strings.HasPrefix(key, b.under) {
		return
	}
	d := 20 * time.Millisecond
	if path.Base(key) == "00000000000000000050.jsonl" {
		d = 200 * time.Millisecond
	}
	time.Sleep(d)
}

func (b *slowCopies) Copy(ctx context.Context, dst, src string) error {
	b.delay(dst)
	err := b.Bucket.Copy(ctx, dst, src)
	if err == nil && strings.HasPrefix(dst, b.under) {
		b.landed()
	}
	return err
}

func (b *slowCopies) PutIfAbsent(ctx context.Context, key string, data []byte, md map[string]string) error {
	b.delay(key)
	err := b.Bucket.PutIfAbsent(ctx, key, data, md)
	if err == nil && strings.HasPrefix(key, b.under) {
		b.landed()
	}
	return err
}

// TestCopiedPrefixIsWholeWhenItsHeadIsAtTheCut: while a fork's prefix is
// being copied, its log's head reaches the cut only once every event
// through the cut is readable. The child's Session controller and its
// workers trust the head; a log with holes behind it was once assembled as
// if it were whole.
func TestCopiedPrefixIsWholeWhenItsHeadIsAtTheCut(t *testing.T) {
	mem := storetest.Open(t, "mem://", nil)
	src := openLog(t, mem, loc)
	writeTurns(t, src, 10, 8, false) // segments 0–9, 10–19, … 90–99
	for _, cut := range []int64{99, 95} {
		dst := sessionlog.Location{Prefix: "sessions", Namespace: "default", Session: fmt.Sprintf("fork-%d", cut), UID: "u2"}
		slow := &slowCopies{Bucket: mem, under: fmt.Sprintf("sessions/default/fork-%d/", cut)}
		child := openLog(t, slow, dst)
		checked := 0
		slow.landed = func() {
			h, err := child.Head(ctx(t))
			if err != nil || h.Head() < cut {
				return // not there yet: the controller says Seeding
			}
			checked++
			n := int64(0)
			for _, err := range child.Read(ctx(t), 0, math.MaxInt64) {
				if err != nil {
					t.Errorf("cut %d: the head is at seq %d but reading the log fails: %v", cut, h.Head(), err)
					return
				}
				n++
			}
			if n != cut+1 {
				t.Errorf("cut %d: the head is at seq %d but the log holds %d events", cut, h.Head(), n)
			}
		}
		if err := sessionlog.New(slow).CopyPrefix(ctx(t), loc, dst, cut); err != nil {
			t.Fatal(err)
		}
		if checked != 1 {
			t.Errorf("cut %d: the head reached the cut after %d of the copy's writes, want only after the last", cut, checked)
		}
	}
}

func snapshot(t *testing.T, b store.Bucket, prefix string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for o, err := range b.List(ctx(t), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		data, err := b.Get(ctx(t), o.Key)
		if err != nil {
			t.Fatal(err)
		}
		out[o.Key] = data
	}
	return out
}

// TestDeleteIsolation: deleting session "a" leaves session "ab" (whose keys
// start with a's name) and a's other incarnations alone.
func TestDeleteIsolation(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.open(t)
			s := sessionlog.New(b)
			a := sessionlog.Location{Prefix: "p", Namespace: "ns", Session: "a", UID: "1"}
			others := []sessionlog.Location{
				{Prefix: "p", Namespace: "ns", Session: "ab", UID: "1"},
				{Prefix: "p", Namespace: "ns", Session: "a", UID: "10"},
				{Prefix: "p", Namespace: "ns2", Session: "a", UID: "1"},
			}
			for _, l := range append([]sessionlog.Location{a}, others...) {
				lg := openLog(t, b, l)
				writeTurns(t, lg, 2, 1, true)
				if err := lg.PutDerived(ctx(t), "assembly/0.json", []byte("{}")); err != nil {
					t.Fatal(err)
				}
			}
			n, err := s.Delete(ctx(t), a, nil)
			if err != nil || n != 7 {
				t.Fatalf("Delete = %d, %v; want 7 objects (6 segments, 1 derived)", n, err)
			}
			if h, err := openLog(t, b, a).Head(ctx(t)); err != nil || h.Next != 0 {
				t.Fatalf("deleted log's head = %+v, %v", h, err)
			}
			for _, l := range others {
				lg := openLog(t, b, l)
				if got := readAll(t, lg); len(got) != 6 {
					t.Fatalf("%s has %d events after deleting %s, want 6", l, len(got), a)
				}
				if _, err := lg.GetDerived(ctx(t), "assembly/0.json", 0); err != nil {
					t.Fatalf("%s lost its derived data: %v", l, err)
				}
			}
		})
	}
}

func TestDerived(t *testing.T) {
	mem := storetest.Open(t, "mem://", nil)
	lg := openLog(t, mem, loc)
	writeTurns(t, lg, 1, 1, false)
	for _, v := range []string{"v1", "v2"} {
		if err := lg.PutDerived(ctx(t), "checkpoint.json", []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := lg.GetDerived(ctx(t), "checkpoint.json", 0); err != nil || string(got) != "v2" {
		t.Fatalf("GetDerived = %q, %v; want v2", got, err)
	}
	for _, bad := range []string{"../log/00000000000000000000.jsonl", "/abs", ""} {
		if err := lg.PutDerived(ctx(t), bad, []byte("x")); err == nil {
			t.Errorf("PutDerived(%q) succeeded", bad)
		}
	}
	if _, err := lg.GetDerived(ctx(t), "missing", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetDerived of a missing name = %v, want ErrNotFound", err)
	}
	if got := readAll(t, lg); len(got) != 3 {
		t.Fatalf("log has %d events, want 3: derived data must not touch it", len(got))
	}
}

func TestLocationValidation(t *testing.T) {
	for _, l := range []sessionlog.Location{
		{Namespace: "", Session: "s", UID: "u"},
		{Namespace: "n", Session: "a/b", UID: "u"},
		{Namespace: "n", Session: "..", UID: "u"},
		{Prefix: "/x", Namespace: "n", Session: "s", UID: "u"},
	} {
		if _, err := sessionlog.New(nil).Log(l); err == nil {
			t.Errorf("Log(%+v) succeeded", l)
		}
	}
}
