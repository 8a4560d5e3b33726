package storetest

import (
	"context"
	"errors"
	"io"
	"iter"
	"sync/atomic"

	"github.com/turnlog/turnlog/internal/store"
)

// Dying is a manager that dies: after Budget requests every request fails
// with ErrDied, as if the process had stopped between two of them. A
// property test runs an operation against it, then again against the
// bucket itself: what a restarted manager does.
type Dying struct {
	store.Bucket
	Budget atomic.Int64
}

// ErrDied is every request's error once a Dying bucket's budget is spent.
var ErrDied = errors.New("the manager died")

// NewDying is b, dying after budget requests.
func NewDying(b store.Bucket, budget int64) *Dying {
	d := &Dying{Bucket: b}
	d.Budget.Store(budget)
	return d
}

func (b *Dying) alive() bool { return b.Budget.Add(-1) >= 0 }

func (b *Dying) Get(ctx context.Context, key string) ([]byte, error) {
	if !b.alive() {
		return nil, ErrDied
	}
	return b.Bucket.Get(ctx, key)
}

func (b *Dying) NewRangeReader(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if !b.alive() {
		return nil, ErrDied
	}
	return b.Bucket.NewRangeReader(ctx, key, off, n)
}

func (b *Dying) Attributes(ctx context.Context, key string) (store.Attributes, error) {
	if !b.alive() {
		return store.Attributes{}, ErrDied
	}
	return b.Bucket.Attributes(ctx, key)
}

func (b *Dying) PutIfAbsent(ctx context.Context, key string, data []byte, md map[string]string) error {
	if !b.alive() {
		return ErrDied
	}
	return b.Bucket.PutIfAbsent(ctx, key, data, md)
}

func (b *Dying) Put(ctx context.Context, key string, data []byte, md map[string]string) error {
	if !b.alive() {
		return ErrDied
	}
	return b.Bucket.Put(ctx, key, data, md)
}

func (b *Dying) Copy(ctx context.Context, dst, src string) error {
	if !b.alive() {
		return ErrDied
	}
	return b.Bucket.Copy(ctx, dst, src)
}

func (b *Dying) Delete(ctx context.Context, key string) error {
	if !b.alive() {
		return ErrDied
	}
	return b.Bucket.Delete(ctx, key)
}

func (b *Dying) List(ctx context.Context, prefix string) iter.Seq2[store.Object, error] {
	if !b.alive() {
		return func(yield func(store.Object, error) bool) { yield(store.Object{}, ErrDied) }
	}
	return b.Bucket.List(ctx, prefix)
}
