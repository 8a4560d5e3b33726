package fairqueue

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// item is "tenant/name".
func tenantOf(item string) string { return item[:strings.IndexByte(item, '/')] }

func newQueue(opts Options[string]) *Queue[string] {
	opts.Tenant = tenantOf
	return New(opts)
}

// get returns the next item, failing the test if none comes in time.
func get(t *testing.T, q *Queue[string]) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		item, shutdown := q.Get()
		if shutdown {
			item = "<shutdown>"
		}
		got <- item
	}()
	select {
	case item := <-got:
		return item
	case <-time.After(10 * time.Second):
		t.Fatal("Get handed out nothing")
		return ""
	}
}

// blocked asserts that Get hands out nothing for a while, then gives the
// waiting Get a way out.
func blocked(t *testing.T, q *Queue[string], release func()) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		item, _ := q.Get()
		got <- item
	}()
	select {
	case item := <-got:
		t.Fatalf("Get handed out %q, want it to wait", item)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	select {
	case item := <-got:
		return item
	case <-time.After(10 * time.Second):
		t.Fatal("Get still waits after the release")
		return ""
	}
}

func TestTenantsTakeTurns(t *testing.T) {
	q := newQueue(Options[string]{})
	for i := range 100 {
		q.Add("flood/s" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	q.Add("quiet/s")
	var order []string
	for range 4 {
		item := get(t, q)
		order = append(order, item)
		q.Done(item)
	}
	if order[1] != "quiet/s" {
		t.Fatalf("order %v: the quiet tenant's item waited behind the flood", order)
	}
	if q.Len() != 97 {
		t.Fatalf("Len = %d, want 97", q.Len())
	}
}

func TestMaxInFlightKeepsWorkersForOthers(t *testing.T) {
	q := newQueue(Options[string]{MaxInFlight: 2})
	q.Add("flood/1")
	q.Add("flood/2")
	q.Add("flood/3")
	a, b := get(t, q), get(t, q)
	if a != "flood/1" || b != "flood/2" {
		t.Fatalf("got %s, %s", a, b)
	}
	// flood/3 waits for one of its tenant's two slots; another tenant's
	// item added later goes first.
	q.Add("quiet/1")
	if got := get(t, q); got != "quiet/1" {
		t.Fatalf("got %s, want quiet/1 while flood is at its limit", got)
	}
	if got := blocked(t, q, func() { q.Done("flood/1") }); got != "flood/3" {
		t.Fatalf("got %s after a slot freed, want flood/3", got)
	}
	if q.HeldFor("flood/3") <= 0 {
		t.Fatal("HeldFor(flood/3) is zero, but its tenant's limit held it")
	}
	if q.HeldFor("quiet/1") != 0 {
		t.Fatalf("HeldFor(quiet/1) = %s, want 0", q.HeldFor("quiet/1"))
	}
}

func TestAddsAreCoalesced(t *testing.T) {
	q := newQueue(Options[string]{})
	for range 10 {
		q.Add("a/1")
	}
	if q.Len() != 1 {
		t.Fatalf("Len = %d after 10 adds of one item, want 1", q.Len())
	}
	item := get(t, q)
	// Added again while being worked on: handed out again only once Done,
	// and once however often it was added.
	for range 5 {
		q.Add(item)
	}
	if q.Len() != 0 {
		t.Fatalf("Len = %d while the item is being worked on, want 0", q.Len())
	}
	if got := blocked(t, q, func() { q.Done(item) }); got != item {
		t.Fatalf("got %s, want %s again", got, item)
	}
	q.Done(item)
	if q.Len() != 0 {
		t.Fatalf("Len = %d, want 0", q.Len())
	}
}

func TestRateHoldsOnlyItsTenant(t *testing.T) {
	q := newQueue(Options[string]{Rate: 2, Burst: 1})
	q.Add("flood/1")
	q.Add("flood/2")
	q.Add("quiet/1")
	first := get(t, q)
	q.Done(first)
	second := get(t, q)
	q.Done(second)
	if first != "flood/1" || second != "quiet/1" {
		t.Fatalf("got %s, %s; want flood/1 then quiet/1 (flood over its rate)", first, second)
	}
	// flood/2 comes once its tenant has a token again.
	if got := get(t, q); got != "flood/2" {
		t.Fatalf("got %s, want flood/2", got)
	}
	if q.HeldFor("flood/2") <= 0 {
		t.Fatal("HeldFor(flood/2) is zero, but the rate held it")
	}
}

func TestAddAfter(t *testing.T) {
	q := newQueue(Options[string]{})
	q.AddAfter("a/late", time.Hour)
	q.AddAfter("a/soon", 50*time.Millisecond)
	if got := get(t, q); got != "a/soon" {
		t.Fatalf("got %s, want a/soon", got)
	}
	// An earlier time for a delayed item wins over its later one.
	q.AddAfter("a/late", 10*time.Millisecond)
	if got := get(t, q); got != "a/late" {
		t.Fatalf("got %s, want a/late", got)
	}
	// A later time does not postpone it.
	q.AddAfter("a/x", 20*time.Millisecond)
	q.AddAfter("a/x", time.Hour)
	if got := get(t, q); got != "a/x" {
		t.Fatalf("got %s, want a/x", got)
	}
}

func TestShutDownWithDrain(t *testing.T) {
	q := newQueue(Options[string]{})
	q.Add("a/1")
	item := get(t, q)
	var wg sync.WaitGroup
	drained := make(chan struct{})
	wg.Go(func() {
		q.ShutDownWithDrain()
		close(drained)
	})
	select {
	case <-drained:
		t.Fatal("ShutDownWithDrain returned while an item was being worked on")
	case <-time.After(100 * time.Millisecond):
	}
	q.Add("a/2") // dropped: shutting down
	q.Done(item)
	wg.Wait()
	if got := get(t, q); got != "<shutdown>" {
		t.Fatalf("Get after shutdown returned %s", got)
	}
	if !q.ShuttingDown() {
		t.Fatal("ShuttingDown is false")
	}
}

func TestIdleTenantsAreForgotten(t *testing.T) {
	q := newQueue(Options[string]{MaxInFlight: 1})
	for i := range 50 {
		ns := "ns" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		q.Add(ns + "/s")
		q.Done(get(t, q))
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.tenants) != 0 {
		t.Fatalf("%d tenants kept after all their work was done", len(q.tenants))
	}
}
