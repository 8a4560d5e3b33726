package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
)

func TestFaultyScript(t *testing.T) {
	ctx := context.Background()
	mem, err := store.Open(ctx, "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	f := storetest.NewFaulty(mem, 1, storetest.Rates{})
	f.Script(storetest.TimeoutAfterSuccess, storetest.Conflict, storetest.PreconditionFailed, storetest.Unavailable)
	for _, c := range []struct {
		key     string
		want    error
		written bool
	}{
		{"timeout", store.ErrTimeout, true},
		{"conflict", store.ErrConflict, false},
		{"precondition", store.ErrExists, false},
		{"unavailable", store.ErrUnavailable, false},
		{"clean", nil, true},
	} {
		err := f.PutIfAbsent(ctx, c.key, []byte("x"), nil)
		if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s: PutIfAbsent = %v, want %v", c.key, err, c.want)
		}
		if _, err := mem.Get(ctx, c.key); (err == nil) != c.written {
			t.Errorf("%s: object written = %v, want %v", c.key, err == nil, c.written)
		}
	}
	if got := f.Injected(); got[storetest.TimeoutAfterSuccess] != 1 || got[storetest.Unavailable] != 1 {
		t.Errorf("Injected() = %v", got)
	}
}

func TestFaultyRatesAreSeeded(t *testing.T) {
	run := func(seed uint64) []bool {
		mem, _ := store.Open(context.Background(), "mem://", nil)
		f := storetest.NewFaulty(mem, seed, storetest.Rates{Unavailable: 0.3})
		var failed []bool
		for range 200 {
			failed = append(failed, f.Put(context.Background(), "k", nil, nil) != nil)
		}
		return failed
	}
	a, b := run(7), run(7)
	n := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different fault at write %d", i)
		}
		if a[i] {
			n++
		}
	}
	if n < 30 || n > 90 {
		t.Fatalf("%d of 200 writes failed at rate 0.3", n)
	}
}

func TestCountingListPages(t *testing.T) {
	ctx := context.Background()
	mem, _ := store.Open(ctx, "mem://", nil)
	for i := range 2500 {
		if err := mem.Put(ctx, fmt.Sprintf("p/%05d", i), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	c := storetest.NewCounting(mem)
	n := 0
	for _, err := range c.List(ctx, "p/") {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if got := c.Counts(); n != 2500 || got.ListPages != 3 || got.Requests() != 3 {
		t.Fatalf("listed %d objects in %d pages (%d requests), want 2500 in 3", n, got.ListPages, got.Requests())
	}
}
