package store

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"
)

// fileTmpDir holds files being written, inside the root so that link(2) and
// rename(2) stay on one filesystem. Listing hides it and keys may not use it.
const fileTmpDir = ".turnlog-tmp"

// fileBucket is the file:// backend. gocloud's fileblob serves reads,
// listing and deletion, but every write is done here: fileblob's
// create-if-absent checks for the file and then renames over it, which two
// processes can both pass. Here a create links a fully written temporary
// file to the final name; link(2) fails if the name exists, so exactly one
// writer wins, even across processes on one machine.
//
// Metadata lives where fileblob looks for it: a JSON sidecar "<file>.attrs".
// The winner of a create renames its sidecar into place just after the link,
// so for that instant the object is visible without metadata.
type fileBucket struct {
	blobBucket
	root string
}

func (f *fileBucket) path(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	if key == fileTmpDir || strings.HasPrefix(key, fileTmpDir+"/") {
		return "", fmt.Errorf("invalid object key %q: %s/ is reserved by the file backend", key, fileTmpDir)
	}
	return filepath.Join(f.root, filepath.FromSlash(key)), nil
}

// fileAttrs is the subset of fileblob's sidecar format that turnlog uses.
type fileAttrs struct {
	ContentType string            `json:"user.content_type"`
	Metadata    map[string]string `json:"user.metadata"`
	MD5         []byte            `json:"md5"`
}

// stage writes data and its sidecar to temporary files, so that everything
// that can run out of space happens before the object becomes visible.
func (f *fileBucket) stage(key string, data []byte, md map[string]string) (dataTmp, attrsTmp string, err error) {
	tmpDir := filepath.Join(f.root, fileTmpDir)
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return "", "", err
	}
	dataTmp, err = writeTemp(tmpDir, data, true)
	if err != nil {
		return "", "", err
	}
	sum := md5.Sum(data)
	attrs, err := json.Marshal(fileAttrs{ContentType: contentType(key), Metadata: md, MD5: sum[:]})
	if err != nil {
		_ = os.Remove(dataTmp)
		return "", "", err
	}
	// The sidecar is not synced: after a crash an object may lack its
	// metadata, which costs a writer its token, never the data.
	attrsTmp, err = writeTemp(tmpDir, attrs, false)
	if err != nil {
		_ = os.Remove(dataTmp)
		return "", "", err
	}
	return dataTmp, attrsTmp, nil
}

// writeTemp writes data to a new temporary file in dir, synced to disk if
// sync, and returns its name.
func writeTemp(dir string, data []byte, sync bool) (string, error) {
	t, err := os.CreateTemp(dir, "w-*")
	if err != nil {
		return "", err
	}
	_, err = t.Write(data)
	if err == nil && sync {
		err = t.Sync()
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// CreateTemp makes 0600 files; objects are shared like any other file.
		err = os.Chmod(t.Name(), 0o644)
	}
	if err != nil {
		_ = os.Remove(t.Name())
		return "", err
	}
	return t.Name(), nil
}

func (f *fileBucket) PutIfAbsent(ctx context.Context, key string, data []byte, md map[string]string) error {
	p, err := f.path(key)
	if err != nil {
		return err
	}
	if err := validateMetadata(md); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("create %q: %w", key, err)
	}
	// Fail fast, without writing anything, when the key is plainly taken
	// (a writer that lost a race usually gets here); the link below is what
	// decides races.
	if _, err := os.Lstat(p); err == nil {
		return fmt.Errorf("create %q: %w", key, ErrExists)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("create %q: %w", key, err)
	}
	dataTmp, attrsTmp, err := f.stage(key, data, md)
	if err != nil {
		return fmt.Errorf("create %q: %w", key, err)
	}
	defer os.Remove(dataTmp)
	defer os.Remove(attrsTmp)
	if err := os.Link(dataTmp, p); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create %q: %w", key, ErrExists)
		}
		return fmt.Errorf("create %q: %w", key, err)
	}
	if err := os.Rename(attrsTmp, p+".attrs"); err != nil {
		// Not retryable: the object exists, only its metadata is missing.
		return fmt.Errorf("create %q: object written but its metadata was not: %w", key, err)
	}
	return nil
}

func (f *fileBucket) Put(ctx context.Context, key string, data []byte, md map[string]string) error {
	p, err := f.path(key)
	if err != nil {
		return err
	}
	if err := validateMetadata(md); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	dataTmp, attrsTmp, err := f.stage(key, data, md)
	if err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	defer os.Remove(dataTmp)
	defer os.Remove(attrsTmp)
	if err := os.Rename(dataTmp, p); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	if err := os.Rename(attrsTmp, p+".attrs"); err != nil {
		return fmt.Errorf("put %q: metadata: %w", key, err)
	}
	return nil
}

// Copy hard-links the source: objects are only ever replaced by rename, never
// changed in place, so sharing the inode is safe and moves no bytes.
func (f *fileBucket) Copy(ctx context.Context, dst, src string) error {
	dp, err := f.path(dst)
	if err != nil {
		return err
	}
	sp, err := f.path(src)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("copy %q to %q: %w", src, dst, err)
	}
	fail := func(err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: %w", ErrNotFound, err)
		}
		return fmt.Errorf("copy %q to %q: %w", src, dst, err)
	}
	if st, err := os.Stat(sp); err != nil {
		return fail(err)
	} else if st.IsDir() {
		return fail(fs.ErrNotExist)
	}
	attrs, err := os.ReadFile(sp + ".attrs")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail(err)
	}
	tmpDir := filepath.Join(f.root, fileTmpDir)
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(filepath.Dir(dp), 0o755); err != nil {
		return fail(err)
	}
	// Link under a temporary name, then rename: rename replaces an existing
	// destination atomically, link would refuse it.
	linkTmp := filepath.Join(tmpDir, "l-"+rand.Text())
	defer os.Remove(linkTmp)
	if err := os.Link(sp, linkTmp); err != nil {
		return fail(err)
	}
	if err := os.Rename(linkTmp, dp); err != nil {
		return fail(err)
	}
	if attrs == nil {
		if err := os.Remove(dp + ".attrs"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fail(err)
		}
		return nil
	}
	attrsTmp, err := writeTemp(tmpDir, attrs, false)
	if err != nil {
		return fail(err)
	}
	defer os.Remove(attrsTmp)
	if err := os.Rename(attrsTmp, dp+".attrs"); err != nil {
		return fail(err)
	}
	return nil
}

func (f *fileBucket) List(ctx context.Context, prefix string) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		for o, err := range f.blobBucket.List(ctx, prefix) {
			if err == nil && strings.HasPrefix(o.Key, fileTmpDir+"/") {
				continue
			}
			if !yield(o, err) {
				return
			}
		}
	}
}
