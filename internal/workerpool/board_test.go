package workerpool

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a fake clock a test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// calls records the board's callbacks.
type calls struct {
	mu                     sync.Mutex
	leased, finished, lost []string
	finishedSt, lostSt     []Status
}

func (c *calls) hook(o *Options) {
	o.Leased = func(r Run, _ Status) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.leased = append(c.leased, r.Name)
	}
	o.Finished = func(r Run, st Status) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.finished = append(c.finished, r.Name)
		c.finishedSt = append(c.finishedSt, st)
	}
	o.Lost = func(r Run, st Status) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.lost = append(c.lost, r.Name)
		c.lostSt = append(c.lostSt, st)
	}
}

func (c *calls) snapshot() (leased, finished, lost []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.leased...), append([]string(nil), c.finished...), append([]string(nil), c.lost...)
}

func run(ns, name string) Run {
	return Run{Namespace: ns, Name: name, Session: "s-" + name, SessionUID: "uid-" + name, Args: []string{"worker", "replay", "--session=" + name}}
}

func mustLease(t *testing.T, b *Board, ns, pod string) Lease {
	t.Helper()
	l, ok := b.TryLease(ns, pod)
	if !ok {
		t.Fatalf("TryLease(%s, %s): nothing leased, want a run", ns, pod)
	}
	return l
}

func noLease(t *testing.T, b *Board, ns string) {
	t.Helper()
	if l, ok := b.TryLease(ns, "pod-x"); ok {
		t.Fatalf("TryLease(%s) leased %s, want nothing", ns, l.Name)
	}
}

func state(t *testing.T, b *Board, ns, name string) Status {
	t.Helper()
	st, ok := b.Get(ns, name)
	if !ok {
		t.Fatalf("run %s/%s is not on the board", ns, name)
	}
	return st
}

// leaseOrder leases everything waiting in ns and returns the names in the
// order they came.
func leaseOrder(b *Board, ns string) []string {
	var names []string
	for {
		l, ok := b.TryLease(ns, "pod")
		if !ok {
			return names
		}
		names = append(names, l.Name)
	}
}

func TestBoardFIFOWithinNamespace(t *testing.T) {
	b := NewBoard(Options{})
	for _, n := range []string{"r1", "r2", "r3", "r4"} {
		if st := b.Submit(run("ns", n)); st.State != Waiting {
			t.Fatalf("Submit(%s) = %s, want Waiting", n, st.State)
		}
	}
	l := mustLease(t, b, "ns", "pod-a")
	if l.Name != "r1" || strings.Join(l.Args, " ") != "worker replay --session=r1" || l.ID == "" {
		t.Fatalf("first lease = %+v, want r1 with its command line and an id", l)
	}
	st := state(t, b, "ns", "r1")
	if st.State != Leased || st.Pod != "pod-a" {
		t.Errorf("r1 after its lease: %+v, want Leased by pod-a", st)
	}
	if got := strings.Join(leaseOrder(b, "ns"), ","); got != "r2,r3,r4" {
		t.Errorf("leased in order %s, want r2,r3,r4", got)
	}
}

func TestBoardSubmitDoesNotDuplicate(t *testing.T) {
	b := NewBoard(Options{})
	b.Submit(run("ns", "r1"))
	b.Submit(run("ns", "r2"))
	if st := b.Submit(run("ns", "r1")); st.State != Waiting {
		t.Fatalf("Submit of r1 again = %s, want its status, Waiting", st.State)
	}
	if got := strings.Join(leaseOrder(b, "ns"), ","); got != "r1,r2" {
		t.Fatalf("leased %s, want r1,r2 (r1 once, at its first place)", got)
	}
	// Leased and finished runs are not put back either.
	if st := b.Submit(run("ns", "r1")); st.State != Leased {
		t.Errorf("Submit of leased r1 = %s, want Leased", st.State)
	}
	noLease(t, b, "ns")
	if ns := b.Namespaces(time.Hour); len(ns) != 1 || ns[0].Waiting != 0 || ns[0].Leased != 2 {
		t.Errorf("Namespaces = %+v, want ns with 0 waiting and 2 leased", ns)
	}
}

// TestBoardKeepsARunsFirstArgs: a run is known by its name. Submitted
// again under that name with another command line (the manager hands
// each run the trace context of the reconcile that submits it), it is
// still one run, leased with the command line it was first submitted
// with, and so is its redo after its pod stopped answering.
func TestBoardKeepsARunsFirstArgs(t *testing.T) {
	clk := newClock()
	b := NewBoard(Options{LeaseTimeout: 10 * time.Second, Now: clk.Now})
	first := run("ns", "r1")
	first.Args = append(first.Args, "--traceparent=00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-1111111111111111-01")
	again := run("ns", "r1")
	again.Args = append(again.Args, "--traceparent=00-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-2222222222222222-01")
	b.Submit(first)
	b.Submit(again)
	l := mustLease(t, b, "ns", "pod-a")
	if !slices.Equal(l.Args, first.Args) {
		t.Fatalf("leased %q, want the first submission's %q", l.Args, first.Args)
	}
	noLease(t, b, "ns")
	clk.Advance(10 * time.Second)
	b.Expire()
	b.Submit(again)
	redo := mustLease(t, b, "ns", "pod-b")
	if redo.Name != "r1" || !slices.Equal(redo.Args, first.Args) {
		t.Errorf("the redo leased %s %q, want r1 with the first submission's %q", redo.Name, redo.Args, first.Args)
	}
	noLease(t, b, "ns")
}

func TestBoardNamespaceRunsAndFairness(t *testing.T) {
	b := NewBoard(Options{NamespaceRuns: 2})
	for i := range 100 {
		b.Submit(run("flood", fmt.Sprintf("f%03d", i)))
	}
	b.Submit(run("quiet", "q1"))

	f0 := mustLease(t, b, "flood", "pod-1")
	mustLease(t, b, "flood", "pod-2")
	noLease(t, b, "flood") // at its limit of 2 in flight

	// The flood waits in its own line: the other namespace's run is leased
	// at once.
	if q := mustLease(t, b, "quiet", "pod-q"); q.Name != "q1" {
		t.Fatalf("quiet leased %s, want q1", q.Name)
	}

	// A run ending frees a place.
	if err := b.Finish("flood", f0.ID, true, "ok"); err != nil {
		t.Fatal(err)
	}
	if l := mustLease(t, b, "flood", "pod-1"); l.Name != "f002" {
		t.Errorf("after f000 finished, leased %s, want f002", l.Name)
	}
	noLease(t, b, "flood")
}

func TestBoardBusy(t *testing.T) {
	b := NewBoard(Options{})
	r1 := Run{Namespace: "ns", Name: "r1", Session: "chat", SessionUID: "u1"}
	b.Submit(r1)
	b.Submit(Run{Namespace: "ns", Name: "other", Session: "x", SessionUID: "u2"})
	if got := b.Busy("ns", "u1", "r2"); got != "r1" {
		t.Errorf("Busy(u1, r2) = %q, want r1 (waiting)", got)
	}
	if got := b.Busy("ns", "u1", "r1"); got != "" {
		t.Errorf("Busy(u1, r1) = %q, want \"\": r1 itself does not count", got)
	}
	if got := b.Busy("other-ns", "u1", "r2"); got != "" {
		t.Errorf("Busy in another namespace = %q, want \"\"", got)
	}
	l := mustLease(t, b, "ns", "pod")
	if got := b.Busy("ns", "u1", "r2"); got != "r1" {
		t.Errorf("Busy(u1, r2) = %q, want r1 (leased)", got)
	}
	if err := b.Finish("ns", l.ID, true, ""); err != nil {
		t.Fatal(err)
	}
	if got := b.Busy("ns", "u1", "r2"); got != "" {
		t.Errorf("Busy(u1, r2) after r1 finished = %q, want \"\"", got)
	}
}

func TestBoardSubmitForgetsSessionsFinishedRuns(t *testing.T) {
	b := NewBoard(Options{})
	b.Submit(Run{Namespace: "ns", Name: "r1", SessionUID: "u1"})
	b.Submit(Run{Namespace: "ns", Name: "o1", SessionUID: "u2"})
	for range 2 {
		l := mustLease(t, b, "ns", "pod")
		if err := b.Finish("ns", l.ID, true, ""); err != nil {
			t.Fatal(err)
		}
	}
	if st := state(t, b, "ns", "r1"); st.State != Done {
		t.Fatalf("r1 = %s, want Done", st.State)
	}
	// A finished run's name submitted again is not run again.
	if st := b.Submit(Run{Namespace: "ns", Name: "r1", SessionUID: "u1"}); st.State != Done {
		t.Fatalf("Submit of finished r1 = %s, want Done", st.State)
	}
	noLease(t, b, "ns")

	b.Submit(Run{Namespace: "ns", Name: "r2", SessionUID: "u1"})
	if _, ok := b.Get("ns", "r1"); ok {
		t.Error("r1 still on the board after a new run of its Session was submitted")
	}
	if st := state(t, b, "ns", "o1"); st.State != Done {
		t.Errorf("another Session's finished run o1 = %s, want kept, Done", st.State)
	}
	if st := state(t, b, "ns", "r2"); st.State != Waiting {
		t.Errorf("r2 = %s, want Waiting", st.State)
	}
}

func TestBoardFinish(t *testing.T) {
	for _, ok := range []bool{true, false} {
		t.Run(fmt.Sprint(ok), func(t *testing.T) {
			var c calls
			o := Options{}
			c.hook(&o)
			b := NewBoard(o)
			b.Submit(run("ns", "r1"))
			l := mustLease(t, b, "ns", "pod-a")
			if err := b.Finish("ns", l.ID, ok, "the summary"); err != nil {
				t.Fatal(err)
			}
			want := Done
			if !ok {
				want = Failed
			}
			st := state(t, b, "ns", "r1")
			if st.State != want || st.Attempt != l.ID || st.Message != "the summary" || st.Pod != "pod-a" || st.Abandoned {
				t.Errorf("status = %+v, want %s, Attempt %s, Message %q, Pod pod-a", st, want, l.ID, "the summary")
			}
			// A second report of the same lease is refused and not told.
			if err := b.Finish("ns", l.ID, true, "again"); !errors.Is(err, ErrGone) {
				t.Errorf("second Finish = %v, want ErrGone", err)
			}
			if err := b.Heartbeat("ns", l.ID); !errors.Is(err, ErrGone) {
				t.Errorf("Heartbeat after Finish = %v, want ErrGone", err)
			}
			leased, finished, lost := c.snapshot()
			if strings.Join(leased, ",") != "r1" || strings.Join(finished, ",") != "r1" || len(lost) != 0 {
				t.Errorf("callbacks: leased %q finished %q lost %q, want r1 once each, no lost", leased, finished, lost)
			}
			if c.finishedSt[0].State != want || c.finishedSt[0].Attempt != l.ID {
				t.Errorf("Finished told %+v, want %s with Attempt %s", c.finishedSt[0], want, l.ID)
			}
		})
	}
}

func TestBoardHeartbeatKeepsLeaseAlive(t *testing.T) {
	clk := newClock()
	var c calls
	o := Options{LeaseTimeout: 10 * time.Second, Now: clk.Now}
	c.hook(&o)
	b := NewBoard(o)
	b.Submit(run("ns", "r1"))
	l := mustLease(t, b, "ns", "pod-a")
	for range 5 {
		clk.Advance(8 * time.Second)
		if err := b.Heartbeat("ns", l.ID); err != nil {
			t.Fatalf("Heartbeat: %v", err)
		}
		b.Expire()
	}
	// 40s in, three times the timeout, and still held.
	clk.Advance(9 * time.Second)
	b.Expire()
	if st := state(t, b, "ns", "r1"); st.State != Leased || st.Lost != 0 {
		t.Fatalf("after heartbeats: %+v, want still Leased, nothing lost", st)
	}
	// Silence for the timeout gives it up.
	clk.Advance(time.Second)
	b.Expire()
	st := state(t, b, "ns", "r1")
	if st.State != Waiting || st.Lost != 1 || st.LostPod != "pod-a" {
		t.Fatalf("after the timeout without heartbeats: %+v, want Waiting, Lost 1, LostPod pod-a", st)
	}
	if err := b.Heartbeat("ns", l.ID); !errors.Is(err, ErrGone) {
		t.Errorf("Heartbeat of the given-up lease = %v, want ErrGone", err)
	}
	if err := b.Finish("ns", l.ID, true, ""); !errors.Is(err, ErrGone) {
		t.Errorf("Finish of the given-up lease = %v, want ErrGone", err)
	}
}

func TestBoardExpiredLeaseGoesToFront(t *testing.T) {
	clk := newClock()
	var c calls
	o := Options{LeaseTimeout: 10 * time.Second, Now: clk.Now}
	c.hook(&o)
	b := NewBoard(o)
	b.Submit(run("ns", "r1"))
	b.Submit(run("ns", "r2"))
	first := mustLease(t, b, "ns", "pod-a") // r1
	b.Submit(run("ns", "r3"))
	clk.Advance(10 * time.Second)
	b.Expire()

	_, finished, lost := c.snapshot()
	if strings.Join(lost, ",") != "r1" || len(finished) != 0 {
		t.Fatalf("callbacks: lost %q finished %q, want r1 lost, nothing finished", lost, finished)
	}
	if c.lostSt[0].LostPod != "pod-a" || c.lostSt[0].Lost != 1 || !strings.Contains(c.lostSt[0].Message, "pod-a") {
		t.Errorf("Lost told %+v, want Lost 1 and the pod pod-a named", c.lostSt[0])
	}
	l := mustLease(t, b, "ns", "pod-b")
	if l.Name != "r1" || l.ID == first.ID {
		t.Fatalf("after the lease expired, leased %s (id %s), want r1 again under a new lease", l.Name, l.ID)
	}
	if got := strings.Join(leaseOrder(b, "ns"), ","); got != "r2,r3" {
		t.Errorf("then leased %s, want r2,r3", got)
	}
	if st := state(t, b, "ns", "r1"); st.State != Leased || st.Pod != "pod-b" || st.Lost != 1 {
		t.Errorf("r1 = %+v, want Leased by pod-b with Lost 1", st)
	}
}

func TestBoardMaxLostAbandons(t *testing.T) {
	clk := newClock()
	var c calls
	o := Options{LeaseTimeout: 10 * time.Second, MaxLost: 2, Now: clk.Now}
	c.hook(&o)
	b := NewBoard(o)
	b.Submit(run("ns", "r1"))

	mustLease(t, b, "ns", "pod-a")
	clk.Advance(11 * time.Second)
	b.Expire()
	if st := state(t, b, "ns", "r1"); st.State != Waiting || st.Lost != 1 {
		t.Fatalf("after one lost lease: %+v, want Waiting, Lost 1", st)
	}
	second := mustLease(t, b, "ns", "pod-b")
	clk.Advance(11 * time.Second)
	b.Expire()
	st := state(t, b, "ns", "r1")
	if st.State != Failed || !st.Abandoned || st.Lost != 2 || st.Attempt != second.ID || st.LostPod != "pod-b" {
		t.Fatalf("after MaxLost lost leases: %+v, want Failed, Abandoned, Lost 2, Attempt %s, LostPod pod-b", st, second.ID)
	}
	if !strings.Contains(st.Message, "pod-b") {
		t.Errorf("message %q does not name the pod", st.Message)
	}
	noLease(t, b, "ns")
	_, finished, lost := c.snapshot()
	if strings.Join(lost, ",") != "r1,r1" || strings.Join(finished, ",") != "r1" {
		t.Errorf("callbacks: lost %q finished %q, want lost twice, finished once", lost, finished)
	}
	if fs := c.finishedSt[0]; fs.State != Failed || !fs.Abandoned {
		t.Errorf("Finished told %+v, want Failed and Abandoned", fs)
	}
}

func TestBoardMaxRunTime(t *testing.T) {
	clk := newClock()
	var c calls
	o := Options{LeaseTimeout: 10 * time.Second, MaxRunTime: 30 * time.Second, Now: clk.Now}
	c.hook(&o)
	b := NewBoard(o)
	b.Submit(run("ns", "r1"))
	l := mustLease(t, b, "ns", "pod-a")
	for range 6 {
		clk.Advance(5 * time.Second)
		if err := b.Heartbeat("ns", l.ID); err != nil {
			t.Fatal(err)
		}
		b.Expire()
	}
	if st := state(t, b, "ns", "r1"); st.State != Leased {
		t.Fatalf("at MaxRunTime: %s, want still Leased", st.State)
	}
	clk.Advance(time.Second)
	if err := b.Heartbeat("ns", l.ID); err != nil {
		t.Fatal(err)
	}
	b.Expire()
	st := state(t, b, "ns", "r1")
	if st.State != Failed || !st.Abandoned || st.Attempt != l.ID || !strings.Contains(st.Message, "took longer than 30s") {
		t.Fatalf("past MaxRunTime with heartbeats: %+v, want Failed, Abandoned, the time named", st)
	}
	if err := b.Heartbeat("ns", l.ID); !errors.Is(err, ErrGone) {
		t.Errorf("Heartbeat after MaxRunTime = %v, want ErrGone", err)
	}
	noLease(t, b, "ns") // not put back
	if _, finished, _ := c.snapshot(); strings.Join(finished, ",") != "r1" {
		t.Errorf("Finished called for %q, want r1 once", finished)
	}
}

func TestBoardUnknownOrForeignLease(t *testing.T) {
	b := NewBoard(Options{})
	b.Submit(run("a", "r1"))
	l := mustLease(t, b, "a", "pod-a")
	for _, c := range []struct{ what, ns, id string }{
		{"an unknown lease", "a", "no-such-lease"},
		{"another namespace's lease", "b", l.ID},
	} {
		if err := b.Heartbeat(c.ns, c.id); !errors.Is(err, ErrGone) {
			t.Errorf("Heartbeat of %s = %v, want ErrGone", c.what, err)
		}
		if err := b.Finish(c.ns, c.id, false, "forged"); !errors.Is(err, ErrGone) {
			t.Errorf("Finish of %s = %v, want ErrGone", c.what, err)
		}
	}
	if st := state(t, b, "a", "r1"); st.State != Leased || st.Message != "" {
		t.Fatalf("r1 after another namespace's attempts: %+v, want untouched, Leased", st)
	}
	if err := b.Heartbeat("a", l.ID); err != nil {
		t.Errorf("its own namespace's Heartbeat = %v, want nil", err)
	}
}

func TestBoardRemoveLeased(t *testing.T) {
	var c calls
	o := Options{NamespaceRuns: 1}
	c.hook(&o)
	b := NewBoard(o)
	b.Submit(run("ns", "r1"))
	b.Submit(run("ns", "r2"))
	l := mustLease(t, b, "ns", "pod")
	noLease(t, b, "ns")
	changed := b.Changed("ns")
	b.Remove("ns", "r1")
	select {
	case <-changed:
	default:
		t.Error("removing a leased run did not wake pods waiting for a lease")
	}
	if err := b.Heartbeat("ns", l.ID); !errors.Is(err, ErrGone) {
		t.Errorf("Heartbeat of the removed run's lease = %v, want ErrGone", err)
	}
	if err := b.Finish("ns", l.ID, true, ""); !errors.Is(err, ErrGone) {
		t.Errorf("Finish of the removed run's lease = %v, want ErrGone", err)
	}
	if _, ok := b.Get("ns", "r1"); ok {
		t.Error("r1 still on the board after Remove")
	}
	// Its place in flight is free again.
	if l2 := mustLease(t, b, "ns", "pod"); l2.Name != "r2" {
		t.Errorf("leased %s, want r2", l2.Name)
	}
	if _, finished, _ := c.snapshot(); len(finished) != 0 {
		t.Errorf("Finished called for %q after Remove, want never", finished)
	}
	// A waiting run removed is not leased.
	b.Submit(run("ns", "r3"))
	b.Remove("ns", "r3")
	b.RemoveSession("ns", "uid-r2")
	noLease(t, b, "ns")
}

func TestBoardNamespaces(t *testing.T) {
	clk := newClock()
	b := NewBoard(Options{Now: clk.Now})
	start := clk.Now()
	b.Submit(run("busy", "b1"))
	b.Submit(run("busy", "b2"))
	mustLease(t, b, "busy", "pod")
	b.Submit(run("done", "d1"))
	l := mustLease(t, b, "done", "pod")
	clk.Advance(time.Minute)
	if err := b.Finish("done", l.ID, true, ""); err != nil {
		t.Fatal(err)
	}
	idleAt := clk.Now()

	clk.Advance(10 * time.Minute)
	got := b.Namespaces(time.Hour)
	want := []NamespaceStats{
		{Namespace: "busy", Waiting: 1, Leased: 1},
		{Namespace: "done", IdleSince: idleAt},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Namespaces = %+v\nwant %+v", got, want)
	}
	if !idleAt.After(start) {
		t.Fatal("clock did not move")
	}

	// Idle longer than forget: forgotten, with its finished runs.
	clk.Advance(51 * time.Minute)
	got = b.Namespaces(time.Hour)
	if len(got) != 1 || got[0].Namespace != "busy" || got[0].Waiting != 1 || got[0].Leased != 1 || !got[0].IdleSince.IsZero() {
		t.Fatalf("after an hour idle, Namespaces = %+v, want busy alone", got)
	}
	if _, ok := b.Get("done", "d1"); ok {
		t.Error("the forgotten namespace's finished run is still on the board")
	}
	// A namespace busy for any time is not forgotten.
	if got = b.Namespaces(0); len(got) != 1 || got[0].Namespace != "busy" {
		t.Errorf("Namespaces(0) = %+v, want busy kept", got)
	}
}
