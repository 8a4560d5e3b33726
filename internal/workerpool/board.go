// Package workerpool hands worker runs to worker pods that stay while
// their namespace is busy. The manager keeps a Board: per namespace, a line
// of runs waiting, first come first served. A pod leases the run at the
// front of its own namespace's line over an authenticated connection
// (Handler, Client), keeps the lease alive while it works and reports how
// the run ended. A run whose pod stops answering goes back to the front of
// its line, to be done again by another pod.
//
// A run is a worker command line (worker.Invocation.Args): the one an
// in-process run parses too. Nothing here knows
// Kubernetes; the manager's controllers put the pods there.
package workerpool

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Run is one worker run waiting for, or held by, a worker pod.
type Run struct {
	Namespace string
	// Name identifies the run within its namespace.
	Name string
	// Session and SessionUID name the Session the run is for: at most one
	// unfinished run of a Session is on the board, and a finished run's
	// Session is told (Options.Finished).
	Session, SessionUID string
	// Args is the worker command line after the binary's name.
	Args []string
}

// State is where a run stands.
type State string

// States of a run.
const (
	Waiting State = "Waiting"
	Leased  State = "Leased"
	Done    State = "Done"
	Failed  State = "Failed"
)

// Status is what the board knows of a run.
type Status struct {
	State State
	// Attempt identifies the lease that finished the run (Done, Failed).
	Attempt string
	// Pod holds the run (Leased) or finished it.
	Pod string
	// Message is the worker's one-line summary, or why the run failed.
	Message string
	// Lost counts the leases of this run whose pod stopped answering.
	Lost int
	// LostPod is the last pod that stopped answering during the run;
	// Abandoned: the run failed because its pods did (MaxLost, MaxRunTime).
	LostPod   string
	Abandoned bool
	// Began is when the current lease was taken.
	Began time.Time
}

// Options configure a Board.
type Options struct {
	// NamespaceRuns is how many runs of one namespace may be leased at
	// once; 0 is no limit.
	NamespaceRuns int
	// LeaseTimeout is how long a lease lives without a heartbeat; zero is
	// DefaultLeaseTimeout.
	LeaseTimeout time.Duration
	// MaxRunTime bounds a lease however often its pod answers: a run that
	// hangs while its pod's heartbeats go on is given up as lost. Zero is
	// no bound.
	MaxRunTime time.Duration
	// MaxLost is how many lost leases fail a run; zero is DefaultMaxLost.
	MaxLost int
	// Leased and Finished, if set, are called (outside the board's lock)
	// when a run is leased, and when it is done or failed; Lost when a
	// lease is given up because its pod stopped answering.
	Leased, Finished func(Run, Status)
	Lost             func(Run, Status)
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Defaults of Options.
const (
	DefaultLeaseTimeout = 10 * time.Second
	DefaultMaxLost      = 3
)

// Errors the board answers pods with.
var (
	// ErrGone: the lease is not (or no longer) held: it was given up as
	// lost, its run removed, or the manager restarted.
	ErrGone = errors.New("the lease is no longer held")
)

// Board is the manager's side of the pool: the runs of every namespace.
type Board struct {
	opts Options

	mu         sync.Mutex
	namespaces map[string]*line
	runs       map[runKey]*entry
	leases     map[string]*entry
}

type runKey struct{ namespace, name string }

// line is one namespace's runs.
type line struct {
	waiting []*entry
	leased  int
	// idleSince is when the namespace last had nothing waiting or leased;
	// zero while it is busy.
	idleSince time.Time
	// changed is closed, and replaced, when a lease may have become
	// possible: pods waiting for one look again.
	changed chan struct{}
}

type entry struct {
	Run
	status   Status
	lease    string
	deadline time.Time
	// since is when the run last joined its line.
	since time.Time
}

// NewBoard returns an empty board.
func NewBoard(opts Options) *Board {
	if opts.LeaseTimeout <= 0 {
		opts.LeaseTimeout = DefaultLeaseTimeout
	}
	if opts.MaxLost <= 0 {
		opts.MaxLost = DefaultMaxLost
	}
	return &Board{opts: opts, namespaces: map[string]*line{}, runs: map[runKey]*entry{}, leases: map[string]*entry{}}
}

func (b *Board) now() time.Time {
	if b.opts.Now != nil {
		return b.opts.Now()
	}
	return time.Now()
}

// line returns namespace's line, creating it.
func (b *Board) line(namespace string) *line {
	l := b.namespaces[namespace]
	if l == nil {
		// Idle from the start: a line made by a pod asking in a namespace
		// with no runs is forgotten like any other idle one.
		l = &line{changed: make(chan struct{}), idleSince: b.now()}
		b.namespaces[namespace] = l
	}
	return l
}

func (l *line) signal() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// busy notes whether the line has work, for idleSince.
func (l *line) settle(now time.Time) {
	switch {
	case len(l.waiting) > 0 || l.leased > 0:
		l.idleSince = time.Time{}
	case l.idleSince.IsZero():
		l.idleSince = now
	}
}

// Submit puts run at the back of its namespace's line, unless a run of
// that name is already on the board; either way it returns the run's
// status. A finished run of the same Session under another name is
// forgotten: the Session has moved on.
func (b *Board) Submit(run Run) Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := runKey{run.Namespace, run.Name}
	if e := b.runs[k]; e != nil {
		return e.status
	}
	for key, e := range b.runs {
		if key.namespace == run.Namespace && e.SessionUID == run.SessionUID && finished(e.status.State) {
			delete(b.runs, key)
		}
	}
	e := &entry{Run: run, status: Status{State: Waiting}, since: b.now()}
	b.runs[k] = e
	l := b.line(run.Namespace)
	l.waiting = append(l.waiting, e)
	l.settle(b.now())
	l.signal()
	return e.status
}

func finished(s State) bool { return s == Done || s == Failed }

// Get returns the status of the run name in namespace.
func (b *Board) Get(namespace, name string) (Status, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.runs[runKey{namespace, name}]
	if e == nil {
		return Status{}, false
	}
	return e.status, true
}

// Busy returns the name of an unfinished run of the Session sessionUID in
// namespace other than name, "" if none.
func (b *Board) Busy(namespace, sessionUID, name string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, e := range b.runs {
		if k.namespace == namespace && e.SessionUID == sessionUID && k.name != name && !finished(e.status.State) {
			return k.name
		}
	}
	return ""
}

// Remove takes the run off the board, waiting, leased or finished; a pod
// holding it learns at its next heartbeat (ErrGone) and stops.
func (b *Board) Remove(namespace, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.runs[runKey{namespace, name}]; e != nil {
		b.remove(e)
	}
}

// RemoveSession takes every run of the Session sessionUID off the board.
func (b *Board) RemoveSession(namespace, sessionUID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, e := range b.runs {
		if k.namespace == namespace && e.SessionUID == sessionUID {
			b.remove(e)
		}
	}
}

func (b *Board) remove(e *entry) {
	l := b.line(e.Namespace)
	switch e.status.State {
	case Waiting:
		l.waiting = slices.DeleteFunc(l.waiting, func(w *entry) bool { return w == e })
	case Leased:
		delete(b.leases, e.lease)
		l.leased--
		l.signal()
	}
	delete(b.runs, runKey{e.Namespace, e.Name})
	l.settle(b.now())
}

// Lease is a run handed to a pod.
type Lease struct {
	// ID identifies the lease in heartbeats and the result.
	ID   string   `json:"id"`
	Name string   `json:"name"`
	Args []string `json:"args"`
	// Timeout is how long the board keeps the lease without a heartbeat
	// before it gives the run to another pod; a pod that cannot renew it
	// for that long stops the run. Zero (a manager that does not say) is
	// DefaultLeaseTimeout.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// TryLease hands the run at the front of namespace's line to pod, if one
// waits and the namespace is under its limit.
func (b *Board) TryLease(namespace, pod string) (Lease, bool) {
	b.mu.Lock()
	lease, e, ok := b.tryLease(namespace, pod)
	var run Run
	var st Status
	if ok {
		run, st = e.Run, e.status
	}
	b.mu.Unlock()
	if ok && b.opts.Leased != nil {
		b.opts.Leased(run, st)
	}
	return lease, ok
}

func (b *Board) tryLease(namespace, pod string) (Lease, *entry, bool) {
	l := b.line(namespace)
	if len(l.waiting) == 0 || b.opts.NamespaceRuns > 0 && l.leased >= b.opts.NamespaceRuns {
		return Lease{}, nil, false
	}
	e := l.waiting[0]
	l.waiting = l.waiting[1:]
	l.leased++
	now := b.now()
	e.lease = newID()
	e.deadline = now.Add(b.opts.LeaseTimeout)
	e.status.State, e.status.Pod, e.status.Began = Leased, pod, now
	b.leases[e.lease] = e
	return Lease{ID: e.lease, Name: e.Name, Args: slices.Clone(e.Args), Timeout: b.opts.LeaseTimeout}, e, true
}

// Changed returns a channel closed when namespace's line next changes in a
// way that may make a lease possible.
func (b *Board) Changed(namespace string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.line(namespace).changed
}

// Heartbeat keeps the lease id of namespace alive.
func (b *Board) Heartbeat(namespace, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.leases[id]
	if e == nil || e.Namespace != namespace {
		return ErrGone
	}
	e.deadline = b.now().Add(b.opts.LeaseTimeout)
	return nil
}

// Finish records how the run held by lease id ended: done, or failed for
// message.
func (b *Board) Finish(namespace, id string, ok bool, message string) error {
	b.mu.Lock()
	e := b.leases[id]
	if e == nil || e.Namespace != namespace {
		b.mu.Unlock()
		return ErrGone
	}
	delete(b.leases, id)
	l := b.line(namespace)
	l.leased--
	e.status.State, e.status.Attempt, e.status.Message = Done, id, message
	if !ok {
		e.status.State = Failed
	}
	l.settle(b.now())
	l.signal()
	run, st := e.Run, e.status
	b.mu.Unlock()
	if b.opts.Finished != nil {
		b.opts.Finished(run, st)
	}
	return nil
}

// Expire gives up the leases whose pods stopped answering (or that ran
// past MaxRunTime): each run goes back to the front of its line, or fails
// once it has lost MaxLost leases.
func (b *Board) Expire() {
	type note struct {
		run      Run
		st       Status
		finished bool
	}
	var notes []note
	b.mu.Lock()
	now := b.now()
	for id, e := range b.leases {
		overdue := b.opts.MaxRunTime > 0 && now.Sub(e.status.Began) > b.opts.MaxRunTime
		if now.Before(e.deadline) && !overdue {
			continue
		}
		delete(b.leases, id)
		l := b.line(e.Namespace)
		l.leased--
		e.status.Lost++
		e.status.LostPod = e.status.Pod
		why := fmt.Sprintf("worker pod %s stopped answering during the run", e.status.Pod)
		if overdue {
			why = fmt.Sprintf("the run on worker pod %s took longer than %s", e.status.Pod, b.opts.MaxRunTime)
		}
		lostRun, lostSt := e.Run, e.status
		lostSt.Message = why
		notes = append(notes, note{run: lostRun, st: lostSt})
		if e.status.Lost >= b.opts.MaxLost || overdue {
			e.status.State, e.status.Attempt, e.status.Abandoned = Failed, id, true
			e.status.Message = fmt.Sprintf("%s (%d of %d attempts lost their pod)", why, e.status.Lost, b.opts.MaxLost)
			if overdue {
				e.status.Message = why
			}
			notes = append(notes, note{run: e.Run, st: e.status, finished: true})
		} else {
			// Done again at once, by whichever pod asks first.
			e.status.State, e.status.Pod, e.since = Waiting, "", now
			l.waiting = slices.Insert(l.waiting, 0, e)
		}
		l.settle(now)
		l.signal()
	}
	b.mu.Unlock()
	for _, n := range notes {
		switch {
		case n.finished && b.opts.Finished != nil:
			b.opts.Finished(n.run, n.st)
		case !n.finished && b.opts.Lost != nil:
			b.opts.Lost(n.run, n.st)
		}
	}
}

// OldestWaiting is when the run at the front of namespace's line was
// submitted (or given back); the zero time if none waits.
func (b *Board) OldestWaiting(namespace string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.namespaces[namespace]
	if l == nil || len(l.waiting) == 0 {
		return time.Time{}
	}
	return l.waiting[0].since
}

// WaitingRuns returns namespace's waiting runs, front first.
func (b *Board) WaitingRuns(namespace string) []Run {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.namespaces[namespace]
	if l == nil {
		return nil
	}
	runs := make([]Run, 0, len(l.waiting))
	for _, e := range l.waiting {
		runs = append(runs, e.Run)
	}
	return runs
}

// NamespaceStats is one namespace's load.
type NamespaceStats struct {
	Namespace       string
	Waiting, Leased int
	// IdleSince is when the namespace last had nothing waiting or leased;
	// zero while it has.
	IdleSince time.Time
}

// Namespaces returns every namespace the board has seen a run of, and
// forgets those idle for longer than forget.
func (b *Board) Namespaces(forget time.Duration) []NamespaceStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	var out []NamespaceStats
	for ns, l := range b.namespaces {
		if !l.idleSince.IsZero() && now.Sub(l.idleSince) > forget {
			// Pods waiting on the line look again, on the next one.
			l.signal()
			delete(b.namespaces, ns)
			for k, e := range b.runs {
				if k.namespace == ns && finished(e.status.State) {
					delete(b.runs, k)
				}
			}
			continue
		}
		out = append(out, NamespaceStats{Namespace: ns, Waiting: len(l.waiting), Leased: l.leased, IdleSince: l.idleSince})
	}
	slices.SortFunc(out, func(a, b NamespaceStats) int {
		if a.Namespace < b.Namespace {
			return -1
		}
		if a.Namespace > b.Namespace {
			return 1
		}
		return 0
	})
	return out
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
