// Package storetest holds store.Bucket wrappers and a conformance suite for
// tests: Faulty injects the failures object stores really produce, Counting
// counts requests and bytes, and Run checks that a backend keeps the
// semantics the rest of turnlog relies on.
package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/turnlog/turnlog/internal/store"
)

// Fault is one injected failure of a write (PutIfAbsent, Put or Copy).
type Fault int

const (
	// NoFault lets the write through untouched.
	NoFault Fault = iota
	// TimeoutAfterSuccess performs the write, then reports store.ErrTimeout:
	// the caller cannot tell that it took effect.
	TimeoutAfterSuccess
	// Conflict reports S3's 409 ConditionalRequestConflict (store.ErrConflict)
	// without writing.
	Conflict
	// PreconditionFailed reports a 412 (store.ErrExists) without writing,
	// even though the key may be free. Only PutIfAbsent gets it.
	PreconditionFailed
	// Unavailable reports a 503 (store.ErrUnavailable) without writing.
	Unavailable
	// ExistsAfterSuccess performs the write, then reports store.ErrExists:
	// what a client library that retries on its own (the AWS SDK, on a
	// dropped connection) returns when its first try landed. Only
	// PutIfAbsent gets it.
	ExistsAfterSuccess
	// BrokenAfterSuccess performs the write, then reports an error no
	// sentinel classifies (a connection reset while the answer was on its
	// way).
	BrokenAfterSuccess
)

func (f Fault) String() string {
	switch f {
	case NoFault:
		return "none"
	case TimeoutAfterSuccess:
		return "timeout-after-success"
	case Conflict:
		return "409"
	case PreconditionFailed:
		return "412"
	case Unavailable:
		return "503"
	case ExistsAfterSuccess:
		return "412-after-success"
	case BrokenAfterSuccess:
		return "broken-after-success"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Rates are the probabilities, each in [0,1], that a write gets a fault.
// Their sum must not exceed 1.
type Rates struct {
	TimeoutAfterSuccess, Conflict, PreconditionFailed, Unavailable float64
}

// Faulty wraps a Bucket and injects faults into writes: first any scripted
// ones, in order, then random ones drawn at Rates from a seeded generator.
// Reads, listing and deletion pass through. Safe for concurrent use.
type Faulty struct {
	store.Bucket

	mu       sync.Mutex
	rng      *rand.Rand
	rates    Rates
	script   []Fault
	injected map[Fault]int
}

// NewFaulty wraps b. The same seed gives the same sequence of random faults
// for the same sequence of writes.
func NewFaulty(b store.Bucket, seed uint64, rates Rates) *Faulty {
	return &Faulty{
		Bucket:   b,
		rng:      rand.New(rand.NewPCG(seed, seed^0x5eed)),
		rates:    rates,
		injected: map[Fault]int{},
	}
}

// Script queues faults for the next writes, one per write, before random
// injection resumes.
func (f *Faulty) Script(faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, faults...)
}

// Injected reports how many faults of each kind were injected.
func (f *Faulty) Injected() map[Fault]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[Fault]int, len(f.injected))
	for k, v := range f.injected {
		out[k] = v
	}
	return out
}

func (f *Faulty) next(conditional bool) Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	var fault Fault
	if len(f.script) > 0 {
		fault, f.script = f.script[0], f.script[1:]
	} else {
		x := f.rng.Float64()
		for _, c := range []struct {
			p float64
			f Fault
		}{
			{f.rates.TimeoutAfterSuccess, TimeoutAfterSuccess},
			{f.rates.Conflict, Conflict},
			{f.rates.PreconditionFailed, PreconditionFailed},
			{f.rates.Unavailable, Unavailable},
		} {
			if x < c.p {
				fault = c.f
				break
			}
			x -= c.p
		}
	}
	if (fault == PreconditionFailed || fault == ExistsAfterSuccess) && !conditional {
		fault = NoFault
	}
	if fault != NoFault {
		f.injected[fault]++
	}
	return fault
}

func (f *Faulty) inject(conditional bool, op, key string, write func() error) error {
	switch fault := f.next(conditional); fault {
	case TimeoutAfterSuccess:
		if err := write(); err != nil {
			return err
		}
		return fmt.Errorf("%s %q: injected: %w", op, key, store.ErrTimeout)
	case Conflict:
		return fmt.Errorf("%s %q: injected: %w", op, key, store.ErrConflict)
	case PreconditionFailed:
		return fmt.Errorf("%s %q: injected: %w", op, key, store.ErrExists)
	case Unavailable:
		return fmt.Errorf("%s %q: injected: %w", op, key, store.ErrUnavailable)
	case ExistsAfterSuccess:
		if err := write(); err != nil {
			return err
		}
		return fmt.Errorf("%s %q: injected: %w", op, key, store.ErrExists)
	case BrokenAfterSuccess:
		if err := write(); err != nil {
			return err
		}
		return fmt.Errorf("%s %q: injected: connection reset by peer", op, key)
	}
	return write()
}

func (f *Faulty) PutIfAbsent(ctx context.Context, key string, data []byte, md map[string]string) error {
	return f.inject(true, "create", key, func() error { return f.Bucket.PutIfAbsent(ctx, key, data, md) })
}

func (f *Faulty) Put(ctx context.Context, key string, data []byte, md map[string]string) error {
	return f.inject(false, "put", key, func() error { return f.Bucket.Put(ctx, key, data, md) })
}

func (f *Faulty) Copy(ctx context.Context, dst, src string) error {
	return f.inject(false, "copy", dst, func() error { return f.Bucket.Copy(ctx, dst, src) })
}
