package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
)

func TestConformanceMem(t *testing.T) {
	storetest.Run(t, storetest.Open(t, "mem://", nil), "conformance")
}

func TestConformanceFile(t *testing.T) {
	dir := t.TempDir()
	b := storetest.Open(t, "file://"+dir, nil)
	storetest.Run(t, b, "conformance")
	// Writes leave no temporary files behind.
	tmp, err := os.ReadDir(filepath.Join(dir, ".turnlog-tmp"))
	if err != nil || len(tmp) != 0 {
		t.Fatalf("temporary directory holds %d entries (%v), want none", len(tmp), err)
	}
}

// TestFileTwoOpeners races two independently opened buckets on one
// directory, as two processes would; gocloud's fileblob alone lets both win
// here (its create-if-absent lock is per process).
func TestFileTwoOpeners(t *testing.T) {
	dir := t.TempDir()
	a, b := storetest.Open(t, "file://"+dir, nil), storetest.Open(t, "file://"+dir, nil)
	ctx := context.Background()
	for i := range 200 {
		key := fmt.Sprintf("race/k%03d", i)
		errs := make(chan error, 2)
		go func() { errs <- a.PutIfAbsent(ctx, key, []byte("a"), nil) }()
		go func() { errs <- b.PutIfAbsent(ctx, key, []byte("b"), nil) }()
		e1, e2 := <-errs, <-errs
		if (e1 == nil) == (e2 == nil) {
			t.Fatalf("%s: outcomes %v and %v, want exactly one success", key, e1, e2)
		}
		if e := errors.Join(e1, e2); !errors.Is(e, store.ErrExists) {
			t.Fatalf("%s: loser got %v, want ErrExists", key, e)
		}
	}
}

func TestConformanceVersitygw(t *testing.T) {
	srv := versitygw.Start(t)
	storetest.Run(t, storetest.Open(t, srv.URL, srv.Options()), "conformance")
}

func TestOpenRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"ftp://x", "file://host/dir", "file:///tmp/x?bogus=1", "s3://b?use_path_style=maybe", "::"} {
		if b, err := store.Open(context.Background(), u, nil); err == nil {
			b.Close()
			t.Errorf("Open(%q) succeeded, want an error", u)
		}
	}
}

func TestIsRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{store.ErrConflict, true}, {store.ErrUnavailable, true}, {store.ErrTimeout, true},
		{store.ErrExists, false}, {store.ErrNotFound, false}, {context.Canceled, false},
	} {
		if got := store.IsRetryable(errors.Join(errors.New("context"), c.err)); got != c.want {
			t.Errorf("IsRetryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
