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
// The line is the manager's memory, rebuilt from the Sessions that ask
// after a restart; what counts as going is read from the API server each
// time. A deleted Session leaves the line (leave); one that stops asking
// for another reason loses its place after lineGrace.
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

// lineGrace is how long a Session keeps its place in line without asking
// again. It asks every slotRetry or so, but a namespace with hundreds of
// Sessions waiting gets its reconciles in turn, NamespaceConcurrentReconciles
// at a time, and its Sessions look again that much less often: places must
// outlast that, or the line would be taken in the order reconciles happen
// to run. A place left behind holds a free slot back for at most this
// long.
const lineGrace = time.Minute

type lineEntry struct {
	who   types.NamespacedName
	asked time.Time
}

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
// slots are free: it may if fewer than free Sessions that still ask are
// ahead of it. One that may not keeps (or takes) its place in line, and
// ahead is how many are before it.
func (l *jobLine) admit(who types.NamespacedName, free int) (ok bool, ahead int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	if l.waiting == nil {
		l.waiting = map[string][]lineEntry{}
	}
	line := slices.DeleteFunc(l.waiting[who.Namespace], func(e lineEntry) bool { return now.Sub(e.asked) > lineGrace })
	i := slices.IndexFunc(line, func(e lineEntry) bool { return e.who == who })
	switch {
	case i >= 0 && i < free:
		line = slices.Delete(line, i, i+1)
		ok = true
	case i < 0 && len(line) < free:
		ok = true
	case i >= 0:
		line[i].asked = now
		ahead = i
	default:
		ahead = len(line)
		line = append(line, lineEntry{who: who, asked: now})
	}
	l.setLine(who.Namespace, line)
	return ok, ahead
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
// than at its next look, slotRetry later.
func (l *jobLine) freed(namespace string) {
	if l.wake == nil {
		return
	}
	l.mu.Lock()
	var first types.NamespacedName
	if line := l.waiting[namespace]; len(line) > 0 {
		first = line[0].who
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
