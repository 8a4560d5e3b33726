// Package fairqueue is a controller work queue that serves its tenants in
// turn. The queues client-go and controller-runtime provide are one FIFO
// (or one priority order) for the whole controller, so a tenant that adds
// items faster than they are worked off pushes every other tenant's items
// back behind its own: in turnlog, one namespace nudging hundreds of
// Sessions held another namespace's appends out of status for tens of
// seconds.
//
// Here each tenant (a namespace, for turnlog's controllers) has its own
// FIFO, and Get takes the next item from the next tenant in round-robin
// order, skipping tenants that have MaxInFlight items being worked on or
// have used up their Rate. A tenant's backlog therefore delays another
// tenant's item by at most one item of each busy tenant, and, as long as
// MaxInFlight is below the controller's number of workers, never by the
// length of a slow item: some workers stay free for the others.
//
// Like client-go's queue, an item is never handed out twice at once, and
// an item added again while queued is queued once (so nudges that arrive
// faster than they are worked off are coalesced); one added while it is
// being worked on is queued again when Done.
package fairqueue

import (
	"container/heap"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
)

// Options configure a Queue.
type Options[T comparable] struct {
	// Tenant names the tenant an item belongs to.
	Tenant func(T) string
	// MaxInFlight is how many of a tenant's items may be worked on at once;
	// 0 is no limit.
	MaxInFlight int
	// Rate is how many of a tenant's items per second Get hands out, with
	// bursts of Burst (at least 1); 0 is no limit. Items over the rate wait
	// in their tenant's FIFO, where further adds of them are coalesced.
	Rate  float64
	Burst int
	// RateLimiter times AddRateLimited; nil is client-go's default
	// controller rate limiter.
	RateLimiter workqueue.TypedRateLimiter[T]
	// Metrics, if set, is told how the queue fares.
	Metrics Metrics
}

// Metrics receives what a Queue measures.
type Metrics interface {
	// Depth is the number of items waiting to be handed out.
	Depth(n int)
	// Waited is how long an item waited from being added until handed out.
	Waited(d time.Duration)
	// Held is called when Get passed over a tenant with items waiting
	// because of its limits: "in-flight" or "rate".
	Held(limit string)
}

// Limits name the limits an item can be held by.
const (
	HeldInFlight = "in-flight"
	HeldRate     = "rate"
)

// Queue is a fair, rate-limited, delaying work queue. It implements
// workqueue.TypedRateLimitingInterface, so controller-runtime's controllers
// can use it through their NewQueue option.
type Queue[T comparable] struct {
	opts Options[T]
	rl   workqueue.TypedRateLimiter[T]

	mu   sync.Mutex
	cond *sync.Cond

	tenants map[string]*tenant[T]
	// ring lists the tenants with queued items; next is where Get looks
	// first.
	ring []string
	next int
	// queued holds the items in a tenant FIFO (with the time they were
	// added); dirty the items added while being worked on, queued again
	// when Done.
	queued     map[T]time.Time
	dirty      map[T]struct{}
	processing map[T]struct{}
	// held remembers, for an item handed out, how long its tenant's limits
	// kept it waiting.
	held map[T]time.Duration
	// delayed holds AddAfter's items until their time.
	delayed    delayHeap[T]
	delayTimer *time.Timer
	// rateWake is set while a timer will wake Get when a rate-held tenant
	// has a token again.
	rateWake bool

	shuttingDown bool
}

type tenant[T comparable] struct {
	items    []T
	inFlight int
	limiter  *rate.Limiter
	// lastHeld is when the tenant was last passed over for its limits.
	lastHeld time.Time
}

// New returns a Queue.
func New[T comparable](opts Options[T]) *Queue[T] {
	if opts.Burst < 1 {
		opts.Burst = 1
	}
	rl := opts.RateLimiter
	if rl == nil {
		rl = workqueue.DefaultTypedControllerRateLimiter[T]()
	}
	q := &Queue[T]{
		opts: opts, rl: rl,
		tenants:    map[string]*tenant[T]{},
		queued:     map[T]time.Time{},
		dirty:      map[T]struct{}{},
		processing: map[T]struct{}{},
		held:       map[T]time.Duration{},
	}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Add queues item unless it is queued already.
func (q *Queue[T]) Add(item T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.add(item, time.Now())
}

func (q *Queue[T]) add(item T, now time.Time) {
	if q.shuttingDown {
		return
	}
	if _, ok := q.queued[item]; ok {
		return
	}
	if _, ok := q.processing[item]; ok {
		q.dirty[item] = struct{}{}
		return
	}
	q.push(item, now)
}

// push appends item to its tenant's FIFO.
func (q *Queue[T]) push(item T, now time.Time) {
	key := q.opts.Tenant(item)
	t := q.tenant(key)
	if len(t.items) == 0 {
		q.ring = append(q.ring, key)
	}
	t.items = append(t.items, item)
	q.queued[item] = now
	q.depth()
	q.cond.Signal()
}

func (q *Queue[T]) tenant(key string) *tenant[T] {
	t := q.tenants[key]
	if t == nil {
		t = &tenant[T]{}
		if q.opts.Rate > 0 {
			t.limiter = rate.NewLimiter(rate.Limit(q.opts.Rate), q.opts.Burst)
		}
		q.tenants[key] = t
	}
	return t
}

// Get waits for an item it may hand out and returns it; shutdown is true
// once the queue is shut down and, if draining, empty.
func (q *Queue[T]) Get() (item T, shutdown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.shuttingDown && len(q.queued) == 0 {
			var zero T
			return zero, true
		}
		now := time.Now()
		if item, ok := q.take(now); ok {
			return item, false
		}
		if q.shuttingDown {
			// Items held by their tenant's limits are not worth waiting
			// for on the way out.
			var zero T
			return zero, true
		}
		q.cond.Wait()
	}
}

// take hands out the first item, in ring order from next, whose tenant is
// within its limits.
func (q *Queue[T]) take(now time.Time) (T, bool) {
	var zero T
	var soonest time.Duration
	for i := range q.ring {
		idx := (q.next + i) % len(q.ring)
		key := q.ring[idx]
		t := q.tenants[key]
		if q.opts.MaxInFlight > 0 && t.inFlight >= q.opts.MaxInFlight {
			q.hold(t, now, HeldInFlight)
			continue
		}
		if t.limiter != nil {
			if tokens := t.limiter.TokensAt(now); tokens < 1 {
				d := time.Duration((1 - tokens) / q.opts.Rate * float64(time.Second))
				q.hold(t, now, HeldRate)
				if soonest == 0 || d < soonest {
					soonest = max(d, time.Millisecond)
				}
				continue
			}
			t.limiter.AllowN(now, 1)
		}
		item := t.items[0]
		var z T
		t.items[0] = z
		t.items = t.items[1:]
		if len(t.items) == 0 {
			q.ring = append(q.ring[:idx], q.ring[idx+1:]...)
			q.next = idx
		} else {
			q.next = idx + 1
		}
		if len(q.ring) > 0 {
			q.next %= len(q.ring)
		} else {
			q.next = 0
		}
		t.inFlight++
		if added := q.queued[item]; !t.lastHeld.Before(added) {
			// Its tenant's limits held it back at least once while it
			// waited: all of its wait is the tenant's share running out.
			q.held[item] = now.Sub(added)
		}
		if q.opts.Metrics != nil {
			q.opts.Metrics.Waited(now.Sub(q.queued[item]))
		}
		delete(q.queued, item)
		q.processing[item] = struct{}{}
		q.depth()
		return item, true
	}
	if soonest > 0 && !q.rateWake {
		q.rateWake = true
		time.AfterFunc(soonest, func() {
			q.mu.Lock()
			q.rateWake = false
			q.cond.Broadcast()
			q.mu.Unlock()
		})
	}
	return zero, false
}

func (q *Queue[T]) hold(t *tenant[T], now time.Time, limit string) {
	t.lastHeld = now
	if q.opts.Metrics != nil {
		q.opts.Metrics.Held(limit)
	}
}

// Done marks item as worked on; an item added meanwhile is queued again.
func (q *Queue[T]) Done(item T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.processing[item]; !ok {
		return
	}
	delete(q.processing, item)
	delete(q.held, item)
	key := q.opts.Tenant(item)
	t := q.tenants[key]
	t.inFlight--
	if _, ok := q.dirty[item]; ok {
		delete(q.dirty, item)
		q.push(item, time.Now())
	}
	if t.inFlight == 0 && len(t.items) == 0 && (t.limiter == nil || t.limiter.Tokens() >= float64(q.opts.Burst)) {
		// Nothing of the tenant's is left, and a new limiter would be the
		// same as its own: forget it, so that namespaces come and go
		// without the queue growing.
		delete(q.tenants, key)
	}
	// A tenant at MaxInFlight may have items waiting for this slot.
	q.cond.Broadcast()
}

// HeldFor reports how long item, handed out and not yet Done, waited in
// the queue if its tenant's limits held the tenant back while it waited
// (its wait was then the tenant's own backlog, not other tenants'): zero if
// they did not.
func (q *Queue[T]) HeldFor(item T) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held[item]
}

// AddAfter queues item after d.
func (q *Queue[T]) AddAfter(item T, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shuttingDown {
		return
	}
	now := time.Now()
	if d <= 0 {
		q.add(item, now)
		return
	}
	at := now.Add(d)
	if i, ok := q.delayed.index[item]; ok {
		if !at.Before(q.delayed.items[i].at) {
			return
		}
		q.delayed.items[i].at = at
		heap.Fix(&q.delayed, i)
	} else {
		heap.Push(&q.delayed, delayedItem[T]{item: item, at: at})
	}
	q.armDelayTimer(now)
}

// armDelayTimer sets the timer for the earliest delayed item.
func (q *Queue[T]) armDelayTimer(now time.Time) {
	if len(q.delayed.items) == 0 {
		return
	}
	wait := q.delayed.items[0].at.Sub(now)
	if q.delayTimer == nil {
		q.delayTimer = time.AfterFunc(wait, q.releaseDelayed)
		return
	}
	q.delayTimer.Reset(wait)
}

// releaseDelayed queues the delayed items whose time has come.
func (q *Queue[T]) releaseDelayed() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shuttingDown {
		return
	}
	now := time.Now()
	for len(q.delayed.items) > 0 && !q.delayed.items[0].at.After(now) {
		d := heap.Pop(&q.delayed).(delayedItem[T])
		q.add(d.item, now)
	}
	q.armDelayTimer(now)
}

// AddRateLimited queues item after its rate limiter's wait.
func (q *Queue[T]) AddRateLimited(item T) { q.AddAfter(item, q.rl.When(item)) }

// Forget resets item's rate limiter.
func (q *Queue[T]) Forget(item T) { q.rl.Forget(item) }

// NumRequeues is how often item was rate limited since it was forgotten.
func (q *Queue[T]) NumRequeues(item T) int { return q.rl.NumRequeues(item) }

// Len is the number of items waiting to be handed out.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queued)
}

// ShutDown makes Get return shutdown once nothing it may hand out is left,
// and drops delayed items.
func (q *Queue[T]) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shuttingDown = true
	if q.delayTimer != nil {
		q.delayTimer.Stop()
	}
	q.cond.Broadcast()
}

// ShutDownWithDrain shuts down and waits until the items handed out are
// Done.
func (q *Queue[T]) ShutDownWithDrain() {
	q.ShutDown()
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.processing) > 0 {
		q.cond.Wait()
	}
}

// ShuttingDown reports whether ShutDown was called.
func (q *Queue[T]) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shuttingDown
}

func (q *Queue[T]) depth() {
	if q.opts.Metrics != nil {
		q.opts.Metrics.Depth(len(q.queued))
	}
}

// delayHeap orders delayed items by time, and knows where each item is so
// that an earlier AddAfter of a delayed item moves it in O(log n).
type delayHeap[T comparable] struct {
	items []delayedItem[T]
	index map[T]int
}

type delayedItem[T comparable] struct {
	item T
	at   time.Time
}

func (h *delayHeap[T]) Len() int           { return len(h.items) }
func (h *delayHeap[T]) Less(i, j int) bool { return h.items[i].at.Before(h.items[j].at) }
func (h *delayHeap[T]) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.index[h.items[i].item], h.index[h.items[j].item] = i, j
}
func (h *delayHeap[T]) Push(x any) {
	d := x.(delayedItem[T])
	if h.index == nil {
		h.index = map[T]int{}
	}
	h.index[d.item] = len(h.items)
	h.items = append(h.items, d)
}
func (h *delayHeap[T]) Pop() any {
	last := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	delete(h.index, last.item)
	return last
}
