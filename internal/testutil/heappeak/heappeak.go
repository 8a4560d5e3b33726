// Package heappeak measures how much heap a piece of code holds at its
// peak, for the tests that bound a reader's memory.
package heappeak

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

const heapObjects = "/memory/classes/heap/objects:bytes"

// Over runs f with the runtime's memory limit at bound over the heap in
// use before it, so that the collector keeps garbage down, and returns
// the peak of the heap's objects over that baseline, sampled every
// millisecond, and how long f took.
func Over(bound uint64, f func()) (peak uint64, took time.Duration) {
	runtime.GC()
	sample := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(base + bound)))

	var highest atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		s := []metrics.Sample{{Name: heapObjects}}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > highest.Load() {
				highest.Store(v)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	start := time.Now()
	f()
	took = time.Since(start)
	close(done)
	wg.Wait()
	return highest.Load() - min(base, highest.Load()), took
}
