package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/store"
)

// Run checks the semantics turnlog relies on against b. Every object it
// writes is under prefix, which must be unused.
func Run(t *testing.T, b store.Bucket, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := conformance{ctx: ctx, b: b, prefix: prefix}
	for _, tc := range []struct {
		name string
		run  func(*testing.T, conformance)
	}{
		{"GetMissing", checkGetMissing},
		{"PutIfAbsent", checkPutIfAbsent},
		{"EmptyObject", checkEmptyObject},
		{"PutOverwrites", checkPutOverwrites},
		{"RangeReader", checkRangeReader},
		{"Copy", checkCopy},
		{"List", checkList},
		{"Delete", checkDelete},
		{"InvalidKeys", checkInvalidKeys},
		{"CreateRace", checkCreateRace},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, c) })
	}
}

// conformance is what every check of Run gets.
type conformance struct {
	ctx    context.Context
	b      store.Bucket
	prefix string
}

// key is a key of the test's own under the prefix.
func (c conformance) key(t *testing.T, name string) string {
	return c.prefix + "/" + t.Name() + "/" + name
}

func checkGetMissing(t *testing.T, c conformance) {
	ctx, b := c.ctx, c.b
	if _, err := b.Get(ctx, c.key(t, "nope")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	if _, err := b.Attributes(ctx, c.key(t, "nope")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Attributes of a missing key: %v, want ErrNotFound", err)
	}
	if _, err := b.NewRangeReader(ctx, c.key(t, "nope"), 0, -1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("NewRangeReader of a missing key: %v, want ErrNotFound", err)
	}
}

func checkPutIfAbsent(t *testing.T, c conformance) {
	ctx, b := c.ctx, c.b
	k := c.key(t, "obj.jsonl")
	md := map[string]string{"writer": "w1"}
	if err := b.PutIfAbsent(ctx, k, []byte("first\n"), md); err != nil {
		t.Fatalf("first create: %v", err)
	}
	err := b.PutIfAbsent(ctx, k, []byte("second\n"), map[string]string{"writer": "w2"})
	if !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	if store.IsRetryable(err) {
		t.Fatalf("ErrExists must not be retryable: %v", err)
	}
	mustGet(ctx, t, b, k, "first\n")
	a, err := b.Attributes(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != 6 || a.Metadata["writer"] != "w1" {
		t.Fatalf("attributes = size %d metadata %v, want size 6 writer w1", a.Size, a.Metadata)
	}
	if a.ModTime.IsZero() {
		t.Fatalf("attributes have no modification time")
	}
}

func checkEmptyObject(t *testing.T, c conformance) {
	ctx, b := c.ctx, c.b
	k := c.key(t, "empty")
	if err := b.PutIfAbsent(ctx, k, nil, nil); err != nil {
		t.Fatal(err)
	}
	mustGet(ctx, t, b, k, "")
	if err := b.PutIfAbsent(ctx, k, nil, nil); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create of an empty object: %v, want ErrExists", err)
	}
}

func checkPutOverwrites(t *testing.T, c conformance) {
	ctx, b := c.ctx, c.b
	k := c.key(t, "derived.json")
	if err := b.Put(ctx, k, []byte("v1"), map[string]string{"v": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, k, []byte("v2-longer"), map[string]string{"v": "2"}); err != nil {
		t.Fatal(err)
	}
	mustGet(ctx, t, b, k, "v2-longer")
	a, err := b.Attributes(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if a.Metadata["v"] != "2" || a.Size != 9 {
		t.Fatalf("attributes after overwrite = %+v, want v=2 size 9", a)
	}
}

func checkRangeReader(t *testing.T, c conformance) {
	ctx, b := c.ctx, c.b
	k := c.key(t, "range")
	if err := b.PutIfAbsent(ctx, k, []byte("0123456789"), nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		off, n int64
		want   string
	}{{0, -1, "0123456789"}, {3, 4, "3456"}, {7, -1, "789"}, {8, 100, "89"}} {
		r, err := b.NewRangeReader(ctx, k, c.off, c.n)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || string(got) != c.want {
			t.Fatalf("range %d+%d = %q, %v; want %q", c.off, c.n, got, err, c.want)
		}
	}
}

func checkCopy(t *testing.T, c conformance) {
	ctx, b := c.ctx, c.b
	src, dst := c.key(t, "src"), c.key(t, "dst")
	if err := b.PutIfAbsent(ctx, src, []byte("payload"), map[string]string{"writer": "w"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Copy(ctx, dst, src); err != nil {
		t.Fatal(err)
	}
	mustGet(ctx, t, b, dst, "payload")
	a, err := b.Attributes(ctx, dst)
	if err != nil || a.Metadata["writer"] != "w" {
		t.Fatalf("copy's metadata = %v, %v; want writer=w", a.Metadata, err)
	}
	// The copy is independent: replacing it leaves the source alone.
	if err := b.Put(ctx, dst, []byte("changed"), nil); err != nil {
		t.Fatal(err)
	}
	mustGet(ctx, t, b, src, "payload")
	// A copy is an object like any other: create-if-absent sees it.
	if err := b.PutIfAbsent(ctx, dst, []byte("x"), nil); !errors.Is(err, store.ErrExists) {
		t.Fatalf("create over a copy: %v, want ErrExists", err)
	}
	if err := b.Copy(ctx, c.key(t, "dst2"), c.key(t, "missing")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("copy of a missing source: %v, want ErrNotFound", err)
	}
}

func checkList(t *testing.T, c conformance) {
	ctx, b := c.ctx, c.b
	base := c.key(t, "")
	want := []string{base + "a/1", base + "a/2", base + "a/10", base + "ab/1", base + "b"}
	for _, k := range want {
		if err := b.PutIfAbsent(ctx, k, []byte(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	got := list(ctx, t, b, base)
	if !slices.Equal(got, want) {
		t.Fatalf("List(%q) = %v, want %v", base, got, want)
	}
	got = list(ctx, t, b, base+"a/")
	if !slices.Equal(got, []string{base + "a/1", base + "a/10", base + "a/2"}) {
		t.Fatalf("List(%q) = %v: must be exactly the keys under a/, sorted", base+"a/", got)
	}
	for o, err := range b.List(ctx, base+"b") {
		if err != nil || o.Size != int64(len(o.Key)) {
			t.Fatalf("listed %+v, %v; want size %d", o, err, len(o.Key))
		}
	}
	if got := list(ctx, t, b, base+"zzz/"); len(got) != 0 {
		t.Fatalf("List of an empty prefix = %v", got)
	}
}

func checkDelete(t *testing.T, c conformance) {
	ctx, b := c.ctx, c.b
	k := c.key(t, "gone")
	if err := b.PutIfAbsent(ctx, k, []byte("x"), map[string]string{"writer": "w"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, k); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if got := list(ctx, t, b, c.key(t, "")); len(got) != 0 {
		t.Fatalf("List after Delete = %v", got)
	}
	// A deleted key can be created again, without the old metadata.
	if err := b.PutIfAbsent(ctx, k, []byte("y"), nil); err != nil {
		t.Fatalf("create after delete: %v", err)
	}
	if a, err := b.Attributes(ctx, k); err != nil || a.Metadata["writer"] != "" {
		t.Fatalf("attributes of the new object = %v, %v; the old metadata leaked", a.Metadata, err)
	}
	if err := b.Delete(ctx, c.key(t, "never")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Delete of a missing key: %v, want ErrNotFound", err)
	}
}

func checkInvalidKeys(t *testing.T, c conformance) {
	ctx, b := c.ctx, c.b
	for _, k := range []string{"", "/abs", "a//b", "a/../b", "a/./b", "trail/", "x.attrs", "ctl\x01"} {
		if err := b.PutIfAbsent(ctx, k, []byte("x"), nil); err == nil {
			t.Errorf("PutIfAbsent(%q) succeeded, want an error", k)
		}
		if _, err := b.Get(ctx, k); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want an invalid-key error", k, err)
		}
	}
	if err := b.Put(ctx, c.key(t, "k"), nil, map[string]string{"Upper": "x"}); err == nil {
		t.Errorf("Put with an upper-case metadata key succeeded")
	}
}

func checkCreateRace(t *testing.T, c conformance) {
	ctx, b := c.ctx, c.b
	RunCreateRace(ctx, t, b, c.key(t, ""), 8, 300)
}

// RunCreateRace has writers goroutines create the same keys, each key with
// every writer's own content, and checks that every key has exactly one
// winner and holds the winner's content.
func RunCreateRace(ctx context.Context, t *testing.T, b store.Bucket, prefix string, writers, keys int) {
	wins := make([][]int, writers) // wins[w] = keys writer w won
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for k := range keys {
				key := fmt.Sprintf("%sk%05d", prefix, k)
				err := b.PutIfAbsent(ctx, key, fmt.Appendf(nil, "writer %d", w), nil)
				for errors.Is(err, store.ErrConflict) { // not applied: safe to repeat
					err = b.PutIfAbsent(ctx, key, fmt.Appendf(nil, "writer %d", w), nil)
				}
				switch {
				case err == nil:
					wins[w] = append(wins[w], k)
				case !errors.Is(err, store.ErrExists):
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	winner := make([]int, keys)
	for i := range winner {
		winner[i] = -1
	}
	double := 0
	for w, ks := range wins {
		for _, k := range ks {
			if winner[k] >= 0 {
				double++
			}
			winner[k] = w
		}
	}
	if double > 0 {
		t.Fatalf("%d keys were created by two writers", double)
	}
	for k, w := range winner {
		if w < 0 {
			t.Fatalf("key %d: no writer won", k)
		}
		mustGet(ctx, t, b, fmt.Sprintf("%sk%05d", prefix, k), fmt.Sprintf("writer %d", w))
	}
}

func mustGet(ctx context.Context, t *testing.T, b store.Bucket, key, want string) {
	t.Helper()
	got, err := b.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(got, []byte(want)) {
		t.Fatalf("Get(%q) = %q, want %q", key, got, want)
	}
}

func list(ctx context.Context, t *testing.T, b store.Bucket, prefix string) []string {
	t.Helper()
	var keys []string
	for o, err := range b.List(ctx, prefix) {
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}
