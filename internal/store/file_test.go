package store_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
)

// A host can write its own Session's directories in a file:// store and
// the manager can read and write everyone's; these attacks try to make the
// store act, through a host's root, on another namespace's files or on a
// file outside the store, or to hang it on a FIFO. Each must be refused
// with an error naming the entry, and leave every other file as it was.
func TestFileRefusesLinksAndSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	b := storetest.Open(t, "file://"+dir, nil)
	ctx := context.Background()

	// The other namespace, written through the store, and a file outside it.
	victimSeg := "team-b/victim/u2/log/00000000000000000000.jsonl"
	for key, data := range map[string]string{
		victimSeg:                         "victim event 0\n",
		"team-b/victim/u2/derived/t.json": "victim transcript",
	} {
		if err := b.PutIfAbsent(ctx, key, []byte(data), map[string]string{"writer": "bob"}); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("outside the store\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, filepath.Join(dir, "team-b"), filepath.Dir(outside))

	seg := "00000000000000000000.jsonl"
	for _, c := range []struct {
		name string
		// plant turns the Session root team-a/<name>/u1 into the attack and
		// returns the key of the entry that must be refused.
		plant func(t *testing.T, root string) (at string)
		kind  string
		// whole is set when the planted entry is a directory of the log,
		// so that writes under it must be refused too.
		whole bool
	}{
		{"segment-link", func(t *testing.T, root string) string {
			mkdir(t, dir, root+"/log")
			symlink(t, "../../../../"+victimSeg, filepath.Join(dir, root, "log", seg))
			return root + "/log/" + seg
		}, "a symbolic link", false},
		{"log-link", func(t *testing.T, root string) string {
			mkdir(t, dir, root)
			symlink(t, "../../../team-b/victim/u2/log", filepath.Join(dir, root, "log"))
			return root + "/log"
		}, "a symbolic link", true},
		{"root-link", func(t *testing.T, root string) string {
			if err := os.RemoveAll(filepath.Join(dir, root)); err != nil {
				t.Fatal(err)
			}
			symlink(t, "../../team-b/victim/u2", filepath.Join(dir, root))
			return root
		}, "a symbolic link", true},
		{"outside-link", func(t *testing.T, root string) string {
			mkdir(t, dir, root+"/log")
			symlink(t, outside, filepath.Join(dir, root, "log", seg))
			return root + "/log/" + seg
		}, "a symbolic link", false},
		{"fifo", func(t *testing.T, root string) string {
			mkdir(t, dir, root+"/log")
			if err := syscall.Mkfifo(filepath.Join(dir, root, "log", seg), 0o644); err != nil {
				t.Fatal(err)
			}
			return root + "/log/" + seg
		}, "a named pipe (FIFO)", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := "team-a/" + c.name + "/u1"
			// A derived object of the Session's own, which stays readable.
			own := root + "/derived/own.json"
			if err := b.Put(ctx, own, []byte("own"), nil); err != nil {
				t.Fatal(err)
			}
			at := c.plant(t, root)
			key := root + "/log/" + seg
			refused := func(what string, err error) {
				t.Helper()
				re, ok := errors.AsType[*store.RefusedError](err)
				if !ok || !errors.Is(err, store.ErrRefused) || store.IsRetryable(err) {
					t.Fatalf("%s = %v, want a *RefusedError (not retryable)", what, err)
				}
				if re.At != at || re.Kind != c.kind || !strings.Contains(err.Error(), at) {
					t.Fatalf("%s refused %q (%s): %v; want %q refused as %s", what, re.At, re.Kind, err, at, c.kind)
				}
				if strings.Contains(err.Error(), dir) || strings.Contains(err.Error(), outside) {
					t.Fatalf("%s: the error names a path on the host: %v", what, err)
				}
			}

			within(t, "Get", func() {
				data, err := b.Get(ctx, key)
				refused("Get", err)
				if data != nil {
					t.Fatalf("Get returned %q", data)
				}
			})
			within(t, "NewRangeReader", func() {
				r, err := b.NewRangeReader(ctx, key, 0, -1)
				if err == nil {
					data, _ := io.ReadAll(r)
					r.Close()
					t.Fatalf("NewRangeReader read %q", data)
				}
				refused("NewRangeReader", err)
			})
			within(t, "Attributes", func() {
				_, err := b.Attributes(ctx, key)
				refused("Attributes", err)
			})

			within(t, "List", func() {
				var objects []string
				var refusedKeys []string
				for o, err := range b.List(ctx, root+"/") {
					if err != nil {
						refused("List", err)
						refusedKeys = append(refusedKeys, o.Key)
						continue
					}
					objects = append(objects, o.Key)
				}
				if !slices.Equal(refusedKeys, []string{at}) {
					t.Fatalf("List reported %v as refused, want [%s]", refusedKeys, at)
				}
				want := []string{own}
				if at == root {
					want = nil // the root itself is the link
				}
				if !slices.Equal(objects, want) {
					t.Fatalf("List yielded objects %v, want %v", objects, want)
				}
			})

			within(t, "Copy", func() {
				dst := "team-a/child-" + c.name + "/u3/log/" + seg
				refused("Copy", b.Copy(ctx, dst, key))
				if _, err := b.Get(ctx, dst); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("the copy's destination: %v, want ErrNotFound", err)
				}
			})

			within(t, "writes", func() {
				next := root + "/log/00000000000000000001.jsonl"
				if c.whole {
					refused("PutIfAbsent under it", b.PutIfAbsent(ctx, next, []byte("forged\n"), nil))
					refused("Put under it", b.Put(ctx, next, []byte("forged\n"), nil))
					refused("Copy under it", b.Copy(ctx, next, own))
				}
				refused("PutIfAbsent over it", b.PutIfAbsent(ctx, key, []byte("forged\n"), nil))
				refused("Put over it", b.Put(ctx, key, []byte("forged\n"), nil))
			})

			within(t, "Delete", func() {
				if c.whole {
					refused("Delete under it", b.Delete(ctx, key))
				}
				// The entry itself is removed, never what it points to.
				if err := b.Delete(ctx, at); err != nil {
					t.Fatalf("Delete(%q): %v", at, err)
				}
				if _, err := os.Lstat(filepath.Join(dir, at)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("after Delete(%q): %v, want it gone", at, err)
				}
			})
			if got := snapshot(t, filepath.Join(dir, "team-b"), filepath.Dir(outside)); !maps.Equal(got, before) {
				t.Fatalf("the other namespace or the outside file changed:\nbefore %v\nafter  %v", before, got)
			}
		})
	}

	t.Run("listing-goes-on", func(t *testing.T) {
		// A listing of the whole namespace reports each refused entry and
		// still yields the objects after it.
		mkdir(t, dir, "team-a/many/u1/log")
		symlink(t, "../../../../"+victimSeg, filepath.Join(dir, "team-a/many/u1/log", seg))
		if err := b.PutIfAbsent(ctx, "team-a/many/u1/log/00000000000000000001.jsonl", []byte("mine\n"), nil); err != nil {
			t.Fatal(err)
		}
		var objects, refusedKeys []string
		for o, err := range b.List(ctx, "team-a/many/") {
			if errors.Is(err, store.ErrRefused) {
				refusedKeys = append(refusedKeys, o.Key)
			} else if err != nil {
				t.Fatal(err)
			} else {
				objects = append(objects, o.Key)
			}
		}
		if !slices.Equal(refusedKeys, []string{"team-a/many/u1/log/" + seg}) ||
			!slices.Equal(objects, []string{"team-a/many/u1/log/00000000000000000001.jsonl"}) {
			t.Fatalf("List = objects %v, refused %v", objects, refusedKeys)
		}
	})

	t.Run("temporary-directory-link", func(t *testing.T) {
		// Writes stage their files in .turnlog-tmp; a link in its place
		// would have them written elsewhere.
		tmp := filepath.Join(dir, ".turnlog-tmp")
		if err := os.RemoveAll(tmp); err != nil {
			t.Fatal(err)
		}
		symlink(t, "team-b/victim/u2/log", tmp)
		defer os.Remove(tmp)
		err := b.Put(ctx, "team-a/tmp/u1/derived/x.json", []byte("x"), nil)
		if re, ok := errors.AsType[*store.RefusedError](err); !ok || re.At != ".turnlog-tmp" {
			t.Fatalf("Put with a linked temporary directory = %v, want .turnlog-tmp refused", err)
		}
	})

	if got := snapshot(t, filepath.Join(dir, "team-b"), filepath.Dir(outside)); !maps.Equal(got, before) {
		t.Fatalf("the other namespace or the outside file changed:\nbefore %v\nafter  %v", before, got)
	}
}

// within runs fn and fails the test if it does not return in 10 seconds, as
// a read blocked on a FIFO would not.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still blocked after 10s", what)
	}
}

// snapshot maps every file and link under dirs to its content (a link to
// its target), so that two snapshots are equal only if nothing changed.
func snapshot(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case e.Type()&fs.ModeSymlink != 0:
				target, err := os.Readlink(path)
				out[path] = "link to " + target
				return err
			case e.Type().IsRegular():
				data, err := os.ReadFile(path)
				out[path] = string(data)
				return err
			case !e.IsDir():
				out[path] = e.Type().String()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func mkdir(t *testing.T, dir, rel string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, rel), 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, at string) {
	t.Helper()
	if err := os.Symlink(target, at); err != nil {
		t.Fatal(err)
	}
}
