package storetest

import (
	"context"
	"io"
	"iter"
	"sync/atomic"

	"github.com/turnlog/turnlog/internal/store"
)

// ListPageSize is the number of keys one list request returns on S3 (and
// what Counting assumes for the other backends).
const ListPageSize = 1000

// Counts are the requests a Counting bucket saw and the object bytes that
// passed through the process.
type Counts struct {
	Gets, RangeReads, Attributes, Creates, Puts, Copies, ListPages, Deletes int64
	// BytesRead counts object bytes returned by Get and range readers;
	// BytesWritten counts bytes sent by PutIfAbsent and Put. Copy moves no
	// bytes through the process.
	BytesRead, BytesWritten int64
}

// Requests is the total number of requests.
func (c Counts) Requests() int64 {
	return c.Gets + c.RangeReads + c.Attributes + c.Creates + c.Puts + c.Copies + c.ListPages + c.Deletes
}

// Counting wraps a Bucket and counts what goes through it. Safe for
// concurrent use.
type Counting struct {
	store.Bucket
	gets, rangeReads, attributes, creates, puts, copies, listPages, deletes atomic.Int64
	bytesRead, bytesWritten                                                 atomic.Int64
}

// NewCounting wraps b.
func NewCounting(b store.Bucket) *Counting { return &Counting{Bucket: b} }

// Counts returns the counts so far.
func (c *Counting) Counts() Counts {
	return Counts{
		Gets: c.gets.Load(), RangeReads: c.rangeReads.Load(), Attributes: c.attributes.Load(),
		Creates: c.creates.Load(), Puts: c.puts.Load(), Copies: c.copies.Load(),
		ListPages: c.listPages.Load(), Deletes: c.deletes.Load(),
		BytesRead: c.bytesRead.Load(), BytesWritten: c.bytesWritten.Load(),
	}
}

// Reset sets every count to zero.
func (c *Counting) Reset() {
	for _, v := range []*atomic.Int64{&c.gets, &c.rangeReads, &c.attributes, &c.creates, &c.puts, &c.copies, &c.listPages, &c.deletes, &c.bytesRead, &c.bytesWritten} {
		v.Store(0)
	}
}

func (c *Counting) Get(ctx context.Context, key string) ([]byte, error) {
	c.gets.Add(1)
	data, err := c.Bucket.Get(ctx, key)
	c.bytesRead.Add(int64(len(data)))
	return data, err
}

func (c *Counting) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	c.rangeReads.Add(1)
	r, err := c.Bucket.NewRangeReader(ctx, key, offset, length)
	if err != nil {
		return nil, err
	}
	return &countingReader{ReadCloser: r, n: &c.bytesRead}, nil
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	return n, err
}

func (c *Counting) Attributes(ctx context.Context, key string) (store.Attributes, error) {
	c.attributes.Add(1)
	return c.Bucket.Attributes(ctx, key)
}

func (c *Counting) PutIfAbsent(ctx context.Context, key string, data []byte, md map[string]string) error {
	c.creates.Add(1)
	c.bytesWritten.Add(int64(len(data)))
	return c.Bucket.PutIfAbsent(ctx, key, data, md)
}

func (c *Counting) Put(ctx context.Context, key string, data []byte, md map[string]string) error {
	c.puts.Add(1)
	c.bytesWritten.Add(int64(len(data)))
	return c.Bucket.Put(ctx, key, data, md)
}

func (c *Counting) Copy(ctx context.Context, dst, src string) error {
	c.copies.Add(1)
	return c.Bucket.Copy(ctx, dst, src)
}

// List counts one request per page of ListPageSize keys, and one for an
// empty listing.
func (c *Counting) List(ctx context.Context, prefix string) iter.Seq2[store.Object, error] {
	return func(yield func(store.Object, error) bool) {
		c.listPages.Add(1)
		n := 0
		for o, err := range c.Bucket.List(ctx, prefix) {
			if err == nil {
				if n > 0 && n%ListPageSize == 0 {
					c.listPages.Add(1)
				}
				n++
			}
			if !yield(o, err) {
				return
			}
		}
	}
}

func (c *Counting) Delete(ctx context.Context, key string) error {
	c.deletes.Add(1)
	return c.Bucket.Delete(ctx, key)
}
