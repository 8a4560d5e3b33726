package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"slices"
	"strings"
	"syscall"
)

// fileTmpDir holds files being written, inside the root so that link(2) and
// rename(2) stay on one filesystem. Listing hides it and keys may not use it.
const fileTmpDir = ".turnlog-tmp"

// maxAttrsBytes bounds a metadata sidecar: turnlog's are a few hundred
// bytes, and a host that can write the directory could plant a huge one.
const maxAttrsBytes = 1 << 20

// fileBucket is the file:// backend: a key is a path below the store's
// directory, its metadata a JSON sidecar "<file>.attrs" in the format of
// gocloud's fileblob, which wrote these directories before.
//
// Whoever can write a Session's directories (its hosts) can put anything
// there, and the manager, which can read and write every namespace's, must
// not be made to act on another's through it. So everything is opened
// beneath an os.Root of the store's directory, which no path or link can
// leave, and, below it, one component at a time: every directory of a key
// must be a directory and every object a regular file, never a symbolic
// link (not even one that stays inside the store, into another namespace),
// a FIFO, a device or a socket. Such an entry is refused with a
// *RefusedError naming it. Each component is looked at (lstat) and then
// opened, and the opened handle must be the same file, so swapping a
// directory for a link between the two is refused too; files are opened
// non-blocking, so a FIFO swapped in cannot hold the caller in open(2).
//
// A create links a fully written temporary file to the final name; link(2)
// fails if the name exists, so exactly one writer wins, even across
// processes on one machine. The winner renames its sidecar into place just
// after the link, so for that instant the object is visible without
// metadata. Links and renames between directories go through the
// descriptors of the checked directories (linkat, renameat), never through
// a path that could be swapped under them.
type fileBucket struct {
	root *os.Root
}

func openFileBucket(dir string) (*fileBucket, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &fileBucket{root: r}, nil
}

func (f *fileBucket) Close() error { return f.root.Close() }

// refusal is what was found where a directory or an object of a key should
// be; the operation turns it into a *RefusedError naming the entry.
type refusal struct{ kind string }

func (r *refusal) Error() string { return r.kind }

// errNotDir: a key runs through an object as if it were a directory.
var errNotDir = errors.New("not a directory")

func refuse(m fs.FileMode) error {
	switch {
	case m&fs.ModeSymlink != 0:
		return &refusal{"a symbolic link"}
	case m&fs.ModeNamedPipe != 0:
		return &refusal{"a named pipe (FIFO)"}
	case m&fs.ModeSocket != 0:
		return &refusal{"a socket"}
	case m&fs.ModeDevice != 0:
		return &refusal{"a device"}
	default:
		return &refusal{"not a regular file or directory"}
	}
}

var errReplaced = &refusal{"an entry that changed while it was being opened"}

// fileError wraps err, met at the entry whose key is at, into the error of
// op on key. A key that runs through an object is not found by a read, and
// cannot be written.
func fileError(op, key, at string, err error) error {
	if r, ok := errors.AsType[*refusal](err); ok {
		return &RefusedError{Op: op, Key: key, At: at, Kind: r.kind}
	}
	if at != "" && at != key {
		err = fmt.Errorf("%q: %w", at, err)
	}
	write := op == "create" || op == "put" || op == "copy"
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotDir) && !write {
		return fmt.Errorf("%s %q: %w: %w", op, key, ErrNotFound, err)
	}
	return fmt.Errorf("%s %q: %w", op, key, err)
}

func (f *fileBucket) checkKey(key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if key == fileTmpDir || strings.HasPrefix(key, fileTmpDir+"/") {
		return fmt.Errorf("invalid object key %q: %s/ is reserved by the file backend", key, fileTmpDir)
	}
	return nil
}

// openDir opens the directory name of parent, which must be a directory
// itself, not a link to one; create makes it if it is missing.
func openDir(parent *os.Root, name string, create bool) (*os.Root, error) {
	fi, err := parent.Lstat(name)
	if create && errors.Is(err, fs.ErrNotExist) {
		// mkdirat(2) does not follow a link either: one planted here since
		// the lstat makes it fail with EEXIST, and the lstat below sees it.
		if err = parent.Mkdir(name, 0o755); err == nil || errors.Is(err, fs.ErrExist) {
			fi, err = parent.Lstat(name)
		}
	}
	switch {
	case err != nil:
		return nil, err
	case fi.Mode().IsRegular():
		return nil, errNotDir
	case !fi.IsDir():
		return nil, refuse(fi.Mode())
	}
	// os.Root follows a link that stays inside the store; the identity
	// check refuses one swapped in since the lstat.
	d, err := parent.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	if st, err := d.Stat("."); err != nil || !os.SameFile(fi, st) {
		d.Close()
		if err == nil {
			err = errReplaced
		}
		return nil, err
	}
	return d, nil
}

// openDirs opens the directory whose key is dirKey ("" for the store's
// own), one checked component at a time. It also returns the key of the
// component that failed.
func (f *fileBucket) openDirs(dirKey string, create bool) (*os.Root, string, error) {
	d, err := f.root.OpenRoot(".")
	if err != nil || dirKey == "" {
		return d, "", err
	}
	at := ""
	for name := range strings.SplitSeq(dirKey, "/") {
		if at == "" {
			at = name
		} else {
			at += "/" + name
		}
		next, err := openDir(d, name, create)
		d.Close()
		if err != nil {
			return nil, at, err
		}
		d = next
	}
	return d, "", nil
}

// parent opens the directory holding key's object and returns it with the
// object's name in it, or the error met at the component whose key is at.
func (f *fileBucket) parent(key string, create bool) (d *os.Root, name, at string, err error) {
	dirKey, name := "", key
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		dirKey, name = key[:i], key[i+1:]
	}
	d, at, err = f.openDirs(dirKey, create)
	return d, name, at, err
}

// tmpDir opens the directory of temporary files, checked like any other.
func (f *fileBucket) tmpDir(op, key string) (*os.Root, error) {
	d, err := openDir(f.root, fileTmpDir, true)
	if err != nil {
		return nil, fileError(op, key, fileTmpDir, err)
	}
	return d, nil
}

// regular refuses everything but a regular file; a directory is no object.
func regular(fi fs.FileInfo) error {
	switch m := fi.Mode(); {
	case m.IsRegular():
		return nil
	case m.IsDir():
		return fs.ErrNotExist
	default:
		return refuse(m)
	}
}

// openRegular opens the regular file name of d for reading.
func openRegular(d *os.Root, name string) (*os.File, fs.FileInfo, error) {
	fi, err := d.Lstat(name)
	if err != nil {
		return nil, nil, err
	}
	if err := regular(fi); err != nil {
		return nil, nil, err
	}
	// Non-blocking: a FIFO swapped in since the lstat makes open(2) return
	// at once instead of waiting for a writer, and is refused below.
	file, err := d.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := file.Stat()
	if err == nil && !os.SameFile(fi, st) {
		err = errReplaced
	}
	if err != nil {
		file.Close()
		return nil, nil, err
	}
	return file, st, nil
}

// readMetadata reads the sidecar of object name in d; none is no metadata.
func readMetadata(d *os.Root, name string) (map[string]string, error) {
	file, _, err := openRegular(d, name+".attrs")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var a fileAttrs
	if err := json.NewDecoder(io.LimitReader(file, maxAttrsBytes)).Decode(&a); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	return a.Metadata, nil
}

// fileAttrs is the subset of fileblob's sidecar format that turnlog uses.
type fileAttrs struct {
	ContentType string            `json:"user.content_type"`
	Metadata    map[string]string `json:"user.metadata"`
	MD5         []byte            `json:"md5"`
}

func (f *fileBucket) open(ctx context.Context, op, key string) (*os.File, fs.FileInfo, error) {
	if err := f.checkKey(key); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s %q: %w", op, key, err)
	}
	d, name, at, err := f.parent(key, false)
	if err != nil {
		return nil, nil, fileError(op, key, at, err)
	}
	defer d.Close()
	file, fi, err := openRegular(d, name)
	if err != nil {
		return nil, nil, fileError(op, key, key, err)
	}
	return file, fi, nil
}

func (f *fileBucket) Get(ctx context.Context, key string) ([]byte, error) {
	file, fi, err := f.open(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	buf := bytes.NewBuffer(make([]byte, 0, fi.Size()+bytes.MinRead))
	if _, err := buf.ReadFrom(file); err != nil {
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	return buf.Bytes(), nil
}

func (f *fileBucket) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if offset < 0 {
		return nil, fmt.Errorf("read %q: negative offset %d", key, offset)
	}
	file, fi, err := f.open(ctx, "read", key)
	if err != nil {
		return nil, err
	}
	if offset > 0 {
		if _, err := file.Seek(offset, io.SeekStart); err != nil {
			file.Close()
			return nil, fmt.Errorf("read %q: %w", key, err)
		}
	}
	r := io.Reader(file)
	if length >= 0 {
		r = io.LimitReader(file, length)
	}
	return &fileReader{Reader: r, f: file, size: fi.Size()}, nil
}

type fileReader struct {
	io.Reader
	f    *os.File
	size int64
}

func (r *fileReader) Close() error { return r.f.Close() }

// Size is the size of the whole object, which lets a reader that wants all
// of it allocate once.
func (r *fileReader) Size() int64 { return r.size }

func (f *fileBucket) Attributes(ctx context.Context, key string) (Attributes, error) {
	const op = "attributes"
	if err := f.checkKey(key); err != nil {
		return Attributes{}, err
	}
	if err := ctx.Err(); err != nil {
		return Attributes{}, fmt.Errorf("%s %q: %w", op, key, err)
	}
	d, name, at, err := f.parent(key, false)
	if err != nil {
		return Attributes{}, fileError(op, key, at, err)
	}
	defer d.Close()
	fi, err := d.Lstat(name)
	if err == nil {
		err = regular(fi)
	}
	if err != nil {
		return Attributes{}, fileError(op, key, key, err)
	}
	md, err := readMetadata(d, name)
	if err != nil {
		return Attributes{}, fileError(op, key, key+".attrs", err)
	}
	return Attributes{Size: fi.Size(), ModTime: fi.ModTime(), Metadata: md}, nil
}

// stage writes data and its sidecar to temporary files in tmp, so that
// everything that can run out of space happens before the object becomes
// visible.
func stage(tmp *os.Root, key string, data []byte, md map[string]string) (dataTmp, attrsTmp string, err error) {
	dataTmp, err = writeTemp(tmp, data, true)
	if err != nil {
		return "", "", err
	}
	sum := md5.Sum(data)
	attrs, err := json.Marshal(fileAttrs{ContentType: contentType(key), Metadata: md, MD5: sum[:]})
	if err != nil {
		_ = tmp.Remove(dataTmp)
		return "", "", err
	}
	// The sidecar is not synced: after a crash an object may lack its
	// metadata, which costs a writer its token, never the data.
	attrsTmp, err = writeTemp(tmp, attrs, false)
	if err != nil {
		_ = tmp.Remove(dataTmp)
		return "", "", err
	}
	return dataTmp, attrsTmp, nil
}

// writeTemp writes data to a new file in tmp, synced to disk if sync, and
// returns its name.
func writeTemp(tmp *os.Root, data []byte, sync bool) (string, error) {
	name := "w-" + rand.Text()
	t, err := tmp.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	_, err = t.Write(data)
	if err == nil && sync {
		err = t.Sync()
	}
	if err == nil {
		// Objects are shared like any other file, whatever the umask.
		err = t.Chmod(0o644)
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = tmp.Remove(name)
		return "", err
	}
	return name, nil
}

// prepareWrite opens what a write of key needs: the directories up to the
// object's (made if missing) and the temporary directory. An existing
// entry at the key that is a link or a special file is refused rather
// than replaced, so that the error names it.
func (f *fileBucket) prepareWrite(ctx context.Context, op, key string, md map[string]string) (dir, tmp *os.Root, name string, existing fs.FileInfo, err error) {
	if err := f.checkKey(key); err != nil {
		return nil, nil, "", nil, err
	}
	if err := validateMetadata(md); err != nil {
		return nil, nil, "", nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, "", nil, fmt.Errorf("%s %q: %w", op, key, err)
	}
	dir, name, at, err := f.parent(key, true)
	if err != nil {
		return nil, nil, "", nil, fileError(op, key, at, err)
	}
	fi, err := dir.Lstat(name)
	switch {
	case err == nil && !fi.Mode().IsRegular() && !fi.IsDir():
		dir.Close()
		return nil, nil, "", nil, fileError(op, key, key, refuse(fi.Mode()))
	case err == nil:
		existing = fi
	case !errors.Is(err, fs.ErrNotExist):
		dir.Close()
		return nil, nil, "", nil, fileError(op, key, key, err)
	}
	tmp, err = f.tmpDir(op, key)
	if err != nil {
		dir.Close()
		return nil, nil, "", nil, err
	}
	return dir, tmp, name, existing, nil
}

func (f *fileBucket) PutIfAbsent(ctx context.Context, key string, data []byte, md map[string]string) error {
	const op = "create"
	dir, tmp, name, existing, err := f.prepareWrite(ctx, op, key, md)
	if err != nil {
		return err
	}
	defer dir.Close()
	defer tmp.Close()
	// Fail fast, without writing anything, when the key is plainly taken
	// (a writer that lost a race usually gets here); the link below is what
	// decides races.
	if existing != nil {
		return fmt.Errorf("%s %q: %w", op, key, ErrExists)
	}
	dataTmp, attrsTmp, err := stage(tmp, key, data, md)
	if err != nil {
		return fmt.Errorf("%s %q: %w", op, key, err)
	}
	defer tmp.Remove(dataTmp)
	defer tmp.Remove(attrsTmp)
	if err := linkat(tmp, dataTmp, dir, name); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s %q: %w", op, key, ErrExists)
		}
		return fmt.Errorf("%s %q: %w", op, key, err)
	}
	if err := renameat(tmp, attrsTmp, dir, name+".attrs"); err != nil {
		// Not retryable: the object exists, only its metadata is missing.
		return fmt.Errorf("%s %q: object written but its metadata was not: %w", op, key, err)
	}
	return nil
}

func (f *fileBucket) Put(ctx context.Context, key string, data []byte, md map[string]string) error {
	const op = "put"
	dir, tmp, name, _, err := f.prepareWrite(ctx, op, key, md)
	if err != nil {
		return err
	}
	defer dir.Close()
	defer tmp.Close()
	dataTmp, attrsTmp, err := stage(tmp, key, data, md)
	if err != nil {
		return fmt.Errorf("%s %q: %w", op, key, err)
	}
	defer tmp.Remove(dataTmp)
	defer tmp.Remove(attrsTmp)
	if err := renameat(tmp, dataTmp, dir, name); err != nil {
		return fmt.Errorf("%s %q: %w", op, key, err)
	}
	if err := renameat(tmp, attrsTmp, dir, name+".attrs"); err != nil {
		return fmt.Errorf("%s %q: metadata: %w", op, key, err)
	}
	return nil
}

// Copy hard-links the source: objects are only ever replaced by rename, never
// changed in place, so sharing the inode is safe and moves no bytes.
func (f *fileBucket) Copy(ctx context.Context, dst, src string) error {
	const op = "copy"
	if err := f.checkKey(src); err != nil {
		return err
	}
	// fail reports a problem with the source, which is not found or
	// refused as for a read.
	fail := func(at string, err error) error {
		if r, ok := errors.AsType[*refusal](err); ok {
			return &RefusedError{Op: op, Key: src, At: at, Kind: r.kind}
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotDir) {
			return fmt.Errorf("copy %q to %q: %w: %w", src, dst, ErrNotFound, err)
		}
		return fmt.Errorf("copy %q to %q: %w", src, dst, err)
	}
	srcDir, srcName, at, err := f.parent(src, false)
	if err != nil {
		return fail(at, err)
	}
	defer srcDir.Close()
	fi, err := srcDir.Lstat(srcName)
	if err == nil {
		err = regular(fi)
	}
	if err != nil {
		return fail(src, err)
	}
	md, err := readMetadata(srcDir, srcName)
	if err != nil {
		return fail(src+".attrs", err)
	}
	dstDir, tmp, dstName, _, err := f.prepareWrite(ctx, op, dst, nil)
	if err != nil {
		return err
	}
	defer dstDir.Close()
	defer tmp.Close()
	// Link under a temporary name, then rename: rename replaces an existing
	// destination atomically, link would refuse it.
	linkTmp := "l-" + rand.Text()
	defer tmp.Remove(linkTmp)
	if err := linkat(srcDir, srcName, tmp, linkTmp); err != nil {
		return fail(src, err)
	}
	// linkat(2) links whatever has the name now; it must be the regular
	// file looked at above.
	if lfi, err := tmp.Lstat(linkTmp); err != nil || !os.SameFile(fi, lfi) {
		if err == nil {
			err = errReplaced
		}
		return fail(src, err)
	}
	if err := renameat(tmp, linkTmp, dstDir, dstName); err != nil {
		return fmt.Errorf("copy %q to %q: %w", src, dst, err)
	}
	if md == nil {
		if err := dstDir.Remove(dstName + ".attrs"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("copy %q to %q: %w", src, dst, err)
		}
		return nil
	}
	attrs, err := json.Marshal(fileAttrs{ContentType: contentType(dst), Metadata: md})
	if err == nil {
		var attrsTmp string
		if attrsTmp, err = writeTemp(tmp, attrs, false); err == nil {
			defer tmp.Remove(attrsTmp)
			err = renameat(tmp, attrsTmp, dstDir, dstName+".attrs")
		}
	}
	if err != nil {
		return fmt.Errorf("copy %q to %q: metadata: %w", src, dst, err)
	}
	return nil
}

// Delete removes key's object and its sidecar. An entry at the key that is
// a symbolic link or a special file is removed itself: unlink(2) never
// follows a link, and removing it is what lets a Session's root be cleaned
// of what a host put there. Directories of the key are checked as for any
// other operation, so nothing is ever removed through a link.
func (f *fileBucket) Delete(ctx context.Context, key string) error {
	const op = "delete"
	if err := f.checkKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %q: %w", op, key, err)
	}
	dir, name, at, err := f.parent(key, false)
	if err != nil {
		return fileError(op, key, at, err)
	}
	defer dir.Close()
	fi, err := dir.Lstat(name)
	if err == nil && fi.IsDir() {
		err = fs.ErrNotExist
	}
	if err != nil {
		return fileError(op, key, key, err)
	}
	if err := dir.Remove(name); err != nil {
		return fileError(op, key, key, err)
	}
	if err := dir.Remove(name + ".attrs"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fileError(op, key, key+".attrs", err)
	}
	return nil
}

// List walks the directories under prefix, without following a link. A
// symbolic link or special file it meets is yielded as a *RefusedError
// with the entry's key in Object.Key, after which the listing goes on; a
// link or special file in place of one of prefix's own directories is the
// only entry.
func (f *fileBucket) List(ctx context.Context, prefix string) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		if err := validatePrefix(prefix); err != nil {
			yield(Object{}, err)
			return
		}
		entries, err := f.list(ctx, prefix)
		if err != nil {
			yield(Object{}, fmt.Errorf("list %q: %w", prefix, err))
			return
		}
		for _, e := range entries {
			if !yield(e.Object, e.err) {
				return
			}
		}
	}
}

type listEntry struct {
	Object
	err error
}

func (f *fileBucket) list(ctx context.Context, prefix string) ([]listEntry, error) {
	dirKey, rest := "", prefix
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dirKey, rest = prefix[:i], prefix[i+1:]
	}
	d, at, err := f.openDirs(dirKey, false)
	var r *refusal
	switch {
	case errors.As(err, &r):
		return []listEntry{{Object{Key: at}, &RefusedError{Op: "list", Key: prefix, At: at, Kind: r.kind}}}, nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errNotDir):
		return nil, nil
	case err != nil:
		return nil, err
	}
	defer d.Close()
	var out []listEntry
	if err := f.walk(ctx, d, dirKey, rest, prefix, &out); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b listEntry) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// walk appends the objects under d, whose key is dirKey, whose names start
// with match, and the refused entries among them.
func (f *fileBucket) walk(ctx context.Context, d *os.Root, dirKey, match, prefix string, out *[]listEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir, err := d.Open(".")
	if err != nil {
		return err
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		if !strings.HasPrefix(name, match) || strings.HasSuffix(name, ".attrs") || dirKey == "" && name == fileTmpDir {
			continue
		}
		key := name
		if dirKey != "" {
			key = dirKey + "/" + name
		}
		fi, err := d.Lstat(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // deleted since the directory was read
		case err != nil:
			return err
		case fi.Mode().IsRegular():
			*out = append(*out, listEntry{Object: Object{Key: key, Size: fi.Size()}})
			continue
		case !fi.IsDir():
			*out = append(*out, listEntry{Object{Key: key}, &RefusedError{Op: "list", Key: prefix, At: key, Kind: refuse(fi.Mode()).Error()}})
			continue
		}
		sub, err := openDir(d, name, false)
		var r *refusal
		switch {
		case errors.As(err, &r):
			*out = append(*out, listEntry{Object{Key: key}, &RefusedError{Op: "list", Key: prefix, At: key, Kind: r.kind}})
			continue
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, errNotDir):
			continue
		case err != nil:
			return err
		}
		err = f.walk(ctx, sub, key, "", prefix, out)
		sub.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
