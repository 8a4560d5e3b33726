package agenthost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
)

var testLoc = Location{Prefix: "sessions", Namespace: "team-a", Session: "chat", UID: "0d9e-uid"}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// storeOn returns a Store on bucket b (a fault wrapper, say).
func storeOn(b store.Bucket) *Store { return &Store{bucket: b, logs: sessionlog.New(b)} }

func memBucket(t testing.TB) store.Bucket {
	b, err := store.Open(context.Background(), "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func openTestLog(t testing.TB, b store.Bucket) *Log {
	t.Helper()
	l, err := storeOn(b).Log(testLoc)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// stored returns the log's events as decoded JSON objects.
func stored(t testing.TB, l *Log) []map[string]any {
	t.Helper()
	var out []map[string]any
	for e, err := range l.log.Read(ctx(t), 0, math.MaxInt64) {
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(e.Line, &v); err != nil {
			t.Fatal(err)
		}
		if v["seq"] != float64(len(out)) {
			t.Fatalf("event %d has seq %v", len(out), v["seq"])
		}
		out = append(out, v)
	}
	return out
}

func mark(w, i int, typ string) Event {
	e, err := RawEvent(fmt.Appendf(nil, `{"type":%q,"turn":1,"w":%d,"i":%d}`, typ, w, i))
	if err != nil {
		panic(err)
	}
	return e
}

// TestAppendersUnderFaults: 16 hosts stream into one log at once through a
// store that times out after writing, reports 409s, spurious 412s and 503s.
// Every event a host got acknowledged is in the log exactly once, and no
// event is in it twice — the guarantee internal/sessionlog's 16-appender
// test gives, kept through batching, timers and retries.
func TestAppendersUnderFaults(t *testing.T) {
	f := storetest.NewFaulty(memBucket(t), 7, storetest.Rates{TimeoutAfterSuccess: 0.05, Conflict: 0.05, PreconditionFailed: 0.05, Unavailable: 0.05})
	l := openTestLog(t, f)
	const hosts, events = 16, 120
	acked := make([]int, hosts) // events 0..acked-1 of host w are acknowledged
	var wg sync.WaitGroup
	errs := make(chan error, hosts)
	for w := range hosts {
		wg.Go(func() {
			a := l.Appender(AppenderOptions{FlushInterval: time.Duration(1+w%3) * time.Millisecond, Writer: fmt.Sprintf("host%d", w)})
			for i := range events {
				typ := "chunk"
				if i%7 == 6 {
					typ = "response/finish" // flushes at once
				}
				if err := a.Add(ctx(t), mark(w, i, typ)); err != nil {
					errs <- fmt.Errorf("host %d event %d: %w", w, i, err)
					return
				}
				if typ != "chunk" {
					acked[w] = i + 1
				}
				if i%11 == 0 {
					time.Sleep(2 * time.Millisecond) // let the timer flush some batches
				}
			}
			if err := a.Close(ctx(t)); err != nil {
				errs <- fmt.Errorf("host %d close: %w", w, err)
				return
			}
			acked[w] = events
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[[2]int]bool{}
	next := make([]int, hosts)
	for _, e := range stored(t, l) {
		w, i := int(e["w"].(float64)), int(e["i"].(float64))
		if seen[[2]int{w, i}] {
			t.Fatalf("host %d event %d stored twice", w, i)
		}
		seen[[2]int{w, i}] = true
		if i != next[w] {
			t.Fatalf("host %d: event %d stored after event %d: a host's events must keep their order", w, i, next[w]-1)
		}
		next[w]++
	}
	for w := range hosts {
		if next[w] != acked[w] {
			t.Errorf("host %d: %d events stored, %d acknowledged", w, next[w], acked[w])
		}
	}
	got := f.Injected()
	for _, k := range []storetest.Fault{storetest.TimeoutAfterSuccess, storetest.Conflict, storetest.PreconditionFailed, storetest.Unavailable} {
		if got[k] == 0 {
			t.Errorf("no %v fault was injected: the test proved nothing about it", k)
		}
	}
	t.Logf("faults injected: %v", got)
}

// TestRetryAfterUnknownOutcome: a write lands, but every answer about it is
// lost until the store gives up (outcome unknown). The next flush retries
// the same segment with the same token and recognises it: the events are
// in the log once. Both for a shared log and an owned one.
func TestRetryAfterUnknownOutcome(t *testing.T) {
	for _, owned := range []bool{false, true} {
		t.Run(fmt.Sprintf("owned=%v", owned), func(t *testing.T) {
			f := storetest.NewFaulty(memBucket(t), 1, storetest.Rates{})
			l := openTestLog(t, f)
			var a *Appender
			if owned {
				a = l.AppenderAt(0, AppenderOptions{FlushInterval: -1})
			} else {
				a = l.Appender(AppenderOptions{FlushInterval: -1})
			}
			// The first try's answer is lost after it was stored, and the
			// rest of the retry budget (5 tries of a store that fails,
			// internal/sessionlog/retry.go) finds the store unavailable.
			script := []storetest.Fault{storetest.TimeoutAfterSuccess}
			for range 4 {
				script = append(script, storetest.Unavailable)
			}
			f.Script(script...)
			err := a.Add(ctx(t), mark(0, 0, "chunk"), mark(0, 1, "response/finish"))
			if !errors.Is(err, sessionlog.ErrOutcomeUnknown) {
				t.Fatalf("Add = %v, want an unknown outcome", err)
			}
			if err := a.Add(ctx(t), mark(0, 2, "turn/end")); err != nil {
				t.Fatalf("Add after the unknown outcome: %v", err)
			}
			if got := stored(t, l); len(got) != 3 || got[0]["i"] != 0.0 || got[2]["i"] != 2.0 {
				t.Fatalf("log holds %v, want events 0, 1, 2 once each", got)
			}
		})
	}
}

// TestFlushInterval: events that end nothing are written by the timer.
func TestFlushInterval(t *testing.T) {
	l := openTestLog(t, memBucket(t))
	a := l.Appender(AppenderOptions{FlushInterval: 20 * time.Millisecond})
	defer a.Close(ctx(t))
	if err := a.Add(ctx(t), TurnStart(1), UserText(1, "hi")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(stored(t, l)) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("events not written 10 s after a 20 ms flush interval")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if h, _ := l.log.Head(ctx(t)); h.Segments != 1 {
		t.Errorf("%d segments, want the two events in one", h.Segments)
	}
}

// TestOwnerSeesOtherWriter: a host that owns the log learns, with the
// head's real position, that someone else wrote to it.
func TestOwnerSeesOtherWriter(t *testing.T) {
	l := openTestLog(t, memBucket(t))
	owner := l.AppenderAt(0, AppenderOptions{FlushInterval: -1})
	if err := owner.Add(ctx(t), TurnStart(1), TurnEnd(1, StopReasonStop)); err != nil {
		t.Fatal(err)
	}
	intruder := l.Appender(AppenderOptions{FlushInterval: -1})
	if err := intruder.Add(ctx(t), TurnStart(2), TurnEnd(2, StopReasonStop)); err != nil {
		t.Fatal(err)
	}
	err := owner.Add(ctx(t), TurnStart(2), TurnEnd(2, StopReasonStop))
	var stale *StaleWriterError
	if !errors.As(err, &stale) || stale.Expected != 2 || stale.Next != 4 {
		t.Fatalf("Add = %v, want a stale writer at 2 with the head at 4", err)
	}
	if err := owner.Add(ctx(t), TurnStart(3)); !errors.Is(err, ErrStaleWriter) {
		t.Fatalf("Add after going stale = %v, want ErrStaleWriter", err)
	}
	if n := len(stored(t, l)); n != 4 {
		t.Fatalf("log holds %d events, want 4", n)
	}
}

func TestRawEvent(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{`{"type":"x/y","turn":1}`, ""},
		{`[1]`, "event: not a JSON object"},
		{`{"turn":1}`, `event: no "type"`},
		{`{"type":"chunk","seq":4}`, `event: has a "seq"; the log assigns seqs`},
		{`{"type":`, "event: unexpected end of JSON input"},
	} {
		_, err := RawEvent([]byte(tc.in))
		if got := fmt.Sprint(err); (tc.err == "" && err != nil) || (tc.err != "" && got != tc.err) {
			t.Errorf("RawEvent(%s) = %v, want %q", tc.in, err, tc.err)
		}
	}
}
