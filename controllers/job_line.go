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
// places, and a Job seen finished wakes the Session at the front at once.
//
// The line is the manager's memory, rebuilt from the Sessions that ask
// after a restart; what counts as going is read from the API server each
// time. A deleted Session leaves the line (leave). One that stops asking
// for another reason (its reconciles fail while its store is down, say)
// loses its place when it has not answered a wake within wakeGrace, or
// has not asked for lineGrace.
type jobLine struct {
	mu sync.Mutex
	// locks serialise counting a namespace's Jobs and creating one.
	locks map[string]*namespaceLock
	// waiting are each namespace's Sessions that found no slot, in the
	// order they first asked.
	waiting map[string][]lineEntry
	// wake, if set, is given the Session at the front of a namespace's
	// line when one of its Jobs is seen finished.
	wake func(types.NamespacedName)
	// now is the clock; nil is time.Now.
	now func() time.Time
}

// Pacing of the line (see jobLine).
const (
	// lineRetry is how soon a Session well back in line looks again.
	lineRetry = 20 * time.Second
	// lineGrace is how long a Session keeps its place without asking:
	// past lineRetry, jittered, and a namespace's reconciles coming round
	// late.
	lineGrace = time.Minute
	// wakeGrace is how long the Session at the front has to answer a wake
	// before the next one takes its place.
	wakeGrace = 3 * slotRetry
	// activeWindow is how lately a Session must have asked to hold back
	// those behind it: slotRetry, jittered, and a reconcile's wait in a
	// busy queue.
	activeWindow = 5 * time.Second
)

type lineEntry struct {
	who   types.NamespacedName
	asked time.Time
	// woken is when the entry was last woken for a freed slot.
	woken time.Time
}

// gone reports whether e has lost its place at now.
func (e lineEntry) gone(now time.Time) bool {
	return now.Sub(e.asked) > lineGrace || e.wokenSinceAsked() && now.Sub(e.woken) > wakeGrace
}

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
// are still asking (asked within activeWindow). One that may not keeps (or
// takes) its place in line, ahead of it are the Sessions before that
// place, and retry is when it should ask again: slotRetry near the front,
// lineRetry further back (jobLine).
//
// A Session ahead that has not asked lately keeps its place but does not
// hold the slot: in a namespace whose reconciles are all taken, the
// Session at the front may not come round for a while, and the slot would
// sit free meanwhile. The Sessions near the front look again every
// slotRetry, so in a namespace that keeps up they are always asking, and
// nobody passes them.
func (l *jobLine) admit(who types.NamespacedName, free, limit int) (ok bool, ahead int, retry time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	if l.waiting == nil {
		l.waiting = map[string][]lineEntry{}
	}
	line := slices.DeleteFunc(l.waiting[who.Namespace], func(e lineEntry) bool { return e.gone(now) })
	i := slices.IndexFunc(line, func(e lineEntry) bool { return e.who == who })
	before := line
	if i >= 0 {
		before = line[:i]
	}
	asking := 0
	for _, e := range before {
		if now.Sub(e.asked) <= activeWindow {
			asking++
		}
	}
	switch {
	case asking < free && i >= 0:
		line = slices.Delete(line, i, i+1)
		ok = true
	case asking < free:
		ok = true
	case i >= 0:
		line[i].asked = now
		ahead = i
	default:
		ahead = len(line)
		line = append(line, lineEntry{who: who, asked: now})
	}
	l.setLine(who.Namespace, line)
	retry = slotRetry
	if ahead >= max(limit, 1) {
		retry = lineRetry
	}
	return ok, ahead, retry
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

// freed wakes the Session at the front of namespace's line, if any: one
// of the namespace's Jobs has finished, so its turn has come, now rather
// than at its next look.
func (l *jobLine) freed(namespace string) {
	if l.wake == nil {
		return
	}
	l.mu.Lock()
	var first types.NamespacedName
	if line := l.waiting[namespace]; len(line) > 0 {
		first = line[0].who
		if !line[0].wokenSinceAsked() {
			line[0].woken = l.clock()
		}
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
