package storetest

import (
	"context"
	"testing"

	"github.com/turnlog/turnlog/internal/store"
)

// Open opens the bucket at url for the test, failing it if that fails,
// and closes the bucket when the test ends.
func Open(tb testing.TB, url string, opts *store.Options) store.Bucket {
	tb.Helper()
	b, err := store.Open(context.Background(), url, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}
