package store

import (
	"context"
	"sync"
)

// BucketsOptions configure Buckets. The zero value opens stores with the
// process's own credentials, each behind a breaker of the default limits.
type BucketsOptions struct {
	// Open is passed to Open.
	Open *Options
	// Guard gives the breaker options of the store at url: its name (in
	// its errors and callbacks), its limits and its callbacks. It is called
	// once per store, after the store opened. nil: the default limits, with
	// no name.
	Guard func(url string) GuardOptions
	// Wrap, if set, wraps each store outside its breaker, so that it sees
	// the requests the breaker refuses too.
	Wrap func(Bucket) Bucket
}

// Buckets opens each store once, by URL, behind its circuit breaker
// (Guard), and keeps it until Close. Every user of a store in a process
// shares one bucket: its connection pools, its breaker (which counts
// failures only if it sees them all), and for mem:// its objects, which
// live only while it is open. The manager and the worker pods open their
// stores through it.
type Buckets struct {
	opts BucketsOptions

	mu   sync.Mutex
	open map[string]Bucket
}

// NewBuckets returns an empty cache that opens stores as opts says.
func NewBuckets(opts BucketsOptions) *Buckets {
	return &Buckets{opts: opts, open: map[string]Bucket{}}
}

// Bucket returns the store at url, opening it on its first use. An open
// that fails is not kept: the next call tries again. Opening holds the
// cache, so concurrent first uses of a URL open it once.
func (c *Buckets) Bucket(ctx context.Context, url string) (Bucket, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.open[url]; ok {
		return b, nil
	}
	opened, err := Open(ctx, url, c.opts.Open)
	if err != nil {
		return nil, err
	}
	var guard GuardOptions
	if c.opts.Guard != nil {
		guard = c.opts.Guard(url)
	}
	b := Guard(opened, guard)
	if c.opts.Wrap != nil {
		b = c.opts.Wrap(b)
	}
	c.open[url] = b
	return b, nil
}

// Close closes every store opened so far and forgets it, so that a later
// Bucket opens it again. It returns the first error of a Close.
func (c *Buckets) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first error
	for url, b := range c.open {
		if err := b.Close(); err != nil && first == nil {
			first = err
		}
		delete(c.open, url)
	}
	return first
}
