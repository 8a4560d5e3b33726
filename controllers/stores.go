package controllers

import (
	"context"
	"fmt"
	"sync"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
)

// Stores opens the object stores Sessions keep their logs in.
type Stores interface {
	// Logs returns the session-log store at url; "" is the default store.
	Logs(ctx context.Context, url string) (*sessionlog.Store, error)
	// URL is the store URL Logs(url) opens: what a worker pod is told.
	URL(url string) string
}

// BucketCache opens each store URL once and keeps the bucket for the life
// of the process: buckets hold connection pools, and a mem:// bucket exists
// only as long as it is open.
type BucketCache struct {
	// DefaultURL is the store of Sessions without spec.storage.url.
	DefaultURL string
	// Options are passed to store.Open.
	Options *store.Options

	mu sync.Mutex
	// buckets are counted in turnlog_store_requests_total.
	buckets map[string]store.Bucket
}

// Logs implements Stores.
func (c *BucketCache) Logs(ctx context.Context, url string) (*sessionlog.Store, error) {
	b, err := c.Bucket(ctx, url)
	if err != nil {
		return nil, err
	}
	return sessionlog.New(b), nil
}

// URL implements Stores.
func (c *BucketCache) URL(url string) string {
	if url == "" {
		return c.DefaultURL
	}
	return url
}

// Bucket returns the bucket at url, opening it on first use.
func (c *BucketCache) Bucket(ctx context.Context, url string) (store.Bucket, error) {
	url = c.URL(url)
	if url == "" {
		return nil, fmt.Errorf("no store URL: the Session has no spec.storage.url and the manager no --store-url")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.buckets[url]; ok {
		return b, nil
	}
	opened, err := store.Open(ctx, url, c.Options)
	if err != nil {
		return nil, err
	}
	b := metered(opened)
	if c.buckets == nil {
		c.buckets = map[string]store.Bucket{}
	}
	c.buckets[url] = b
	return b, nil
}

// Close closes every bucket opened so far.
func (c *BucketCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first error
	for url, b := range c.buckets {
		if err := b.Close(); err != nil && first == nil {
			first = err
		}
		delete(c.buckets, url)
	}
	return first
}
