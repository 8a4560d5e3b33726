package controllers

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// jobLine shares a namespace's worker Jobs (--namespace-worker-runs)
// between its Sessions first come, first served, and makes the limit
// exact.
//
// Without it, a Job slot that freed went to whichever Session asked first
// after it: almost always the Session whose Job had just finished, woken
// by that Job's own event, with its next run ready (a host still
// appending). Sessions that had been waiting looked again only slotRetry
// later, and in a namespace of busy Sessions a fork's child could wait for
// as long as they kept appending. And two reconciles of one namespace
// could both count the Jobs going before either created its own, so the
// namespace went one over its limit.
//
// A line costs reconciles, and in a namespace with a long line the
// namespace's reconciles (NamespaceConcurrentReconciles at a time) are
// what a free slot waits for: the Session at the front must look again
// before the slot is used. So only the Sessions near the front look again
// every slotRetry; those further back every lineRetry, keeping their
// places, and a Job seen finished wakes the next Session in line at once.
// Those far back learn that they wait from the line and the cache alone;
// only a Session that may get a slot takes the namespace's lock and counts
// its Jobs on the API server.
//
// A place holds back the Sessions behind it while its Session is not late
// for the time it was told to ask again (activeWindow); one that is late
// is passed, and after lineGrace loses its place: its reconciles fail
// while its store is down, say, or it no longer needs a Job. A deleted
// Session leaves the line (leave). The line is the manager's memory,
// rebuilt from the Sessions that ask after a restart.
type jobLine struct {
	mu sync.Mutex
	// locks serialise counting a namespace's Jobs and creating one.
	locks map[string]*namespaceLock
	// waiting are each namespace's Sessions that found no slot, in the
	// order they first asked.
	waiting map[string][]lineEntry
	// wake, if set, is given the next Session in a namespace's line when
	// one of its Jobs is seen finished.
	wake func(types.NamespacedName)
	// now is the clock; nil is time.Now.
	now func() time.Time
}

// Pacing of the line (see jobLine).
const (
	// lineRetry is how soon a Session well back in line looks again.
	lineRetry = 20 * time.Second
	// lineGrace is how long past the time it was told to look again a
	// Session keeps its place without asking: a namespace's reconciles
	// come round late when many of its Sessions wait.
	lineGrace = time.Minute
	// activeWindow is how long past the time it was told to look again a
	// Session still holds back those behind it: slotRetry's jitter, and a
	// reconcile's wait in a busy queue.
	activeWindow = 5 * time.Second
)

type lineEntry struct {
	who types.NamespacedName
	// asked is when the Session last asked for a slot.
	asked time.Time
	// due is when the Session was told to ask again: its last ask and
	// the retry it was given then, or the moment it was woken for a
	// freed slot.
	due time.Time
	// woken is when the entry was last woken for a freed slot.
	woken time.Time
}

// holding reports whether e holds back the Sessions behind it at now: it
// is not late for the time it was told to ask again. A Session well back
// in line asks every lineRetry, so judging it by its last ask alone (as
// the line once did) let any Session that asks often, a host's nudges
// waking it, pass everyone between it and the front.
func (e lineEntry) holding(now time.Time) bool { return !now.After(e.due.Add(activeWindow)) }

// gone reports whether e has lost its place at now.
func (e lineEntry) gone(now time.Time) bool { return now.After(e.due.Add(lineGrace)) }

// wokenSinceAsked reports whether e was woken and has not asked since.
func (e lineEntry) wokenSinceAsked() bool { return !e.woken.IsZero() && !e.asked.After(e.woken) }

type namespaceLock struct {
	sync.Mutex
	users int
}

// lock holds namespace's lock until the returned func is called.
func (l *jobLine) lock(namespace string) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*namespaceLock{}
	}
	nl := l.locks[namespace]
	if nl == nil {
		nl = &namespaceLock{}
		l.locks[namespace] = nl
	}
	nl.users++
	l.mu.Unlock()
	nl.Lock()
	return func() {
		nl.Unlock()
		l.mu.Lock()
		if nl.users--; nl.users == 0 {
			delete(l.locks, namespace)
		}
		l.mu.Unlock()
	}
}

// admit says whether who may start a Job when free of its namespace's
// slots are free: it may if fewer than free of the Sessions ahead of it
// are holding their places (not late to ask again). take says who is
// about to start its Job, and leaves the line if it may; otherwise admit
// only looks, so that the Job can be counted before it is taken. One that
// may not keeps (or takes) its place in line, ahead of it are the
// Sessions before that place, and retry is when it should ask again:
// slotRetry near the front, lineRetry further back (jobLine).
//
// A Session ahead that is late keeps its place but does not hold the
// slot: in a namespace whose reconciles are all taken, the Session at the
// front may not come round for a while, and the slot would sit free
// meanwhile.
func (l *jobLine) admit(who types.NamespacedName, free, limit int, take bool) (ok bool, ahead int, retry time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	if l.waiting == nil {
		l.waiting = map[string][]lineEntry{}
	}
	line := slices.DeleteFunc(l.waiting[who.Namespace], func(e lineEntry) bool { return e.gone(now) })
	defer func() { l.setLine(who.Namespace, line) }()
	i := slices.IndexFunc(line, func(e lineEntry) bool { return e.who == who })
	before := line
	if i >= 0 {
		before = line[:i]
	}
	holding := 0
	for _, e := range before {
		if e.holding(now) {
			holding++
		}
	}
	if holding < free {
		if take && i >= 0 {
			line = slices.Delete(line, i, i+1)
		}
		return true, 0, 0
	}
	if i < 0 {
		i = len(line)
		line = append(line, lineEntry{who: who})
	}
	retry = slotRetry
	if i >= max(limit, 1) {
		retry = lineRetry
	}
	line[i].asked, line[i].due = now, now.Add(retry)
	return false, i, retry
}

// setLine keeps namespace's line, or forgets it if it is empty, so that
// the map holds only the namespaces that have Sessions waiting.
func (l *jobLine) setLine(namespace string, line []lineEntry) {
	if len(line) == 0 {
		delete(l.waiting, namespace)
	} else {
		l.waiting[namespace] = line
	}
}

// leave takes who out of its namespace's line: it was deleted.
func (l *jobLine) leave(who types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setLine(who.Namespace, slices.DeleteFunc(l.waiting[who.Namespace], func(e lineEntry) bool { return e.who == who }))
}

// freed wakes the first Session in namespace's line not woken since it
// last asked: one of the namespace's Jobs has finished, so its turn has
// come, now rather than at its next look. Until it answers it holds the
// slot for activeWindow; a Job finishing next wakes the one after it.
func (l *jobLine) freed(namespace string) {
	if l.wake == nil {
		return
	}
	l.mu.Lock()
	var first types.NamespacedName
	line := l.waiting[namespace]
	if i := slices.IndexFunc(line, func(e lineEntry) bool { return !e.wokenSinceAsked() }); i >= 0 {
		first = line[i].who
		line[i].woken = l.clock()
		line[i].due = line[i].woken
	}
	l.mu.Unlock()
	if first.Name != "" {
		l.wake(first)
	}
}

func (l *jobLine) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}
