// Package store is the object-storage interface turnlog owns, with backends
// opened by URL: mem://, s3://, gs:// and azblob:// through gocloud.dev/blob,
// and file:// by its own code, confined to its directory (see fileBucket).
//
// The interface is deliberately small. Its one non-obvious operation is
// PutIfAbsent: a create that fails with ErrExists when the key is taken, so two
// writers racing for the same key can never both win. Every backend here
// guarantees that atomically (mem by a lock, file by link(2), the cloud stores
// by a conditional request); see docs/log-format.md, "Storage layout".
//
// Errors are classified into a few sentinels that callers test with
// errors.Is: ErrNotFound, ErrExists, ErrRefused (the file backend's
// *RefusedError), and the retryable ErrConflict, ErrUnavailable and
// ErrTimeout (see IsRetryable).
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"time"
	"unicode/utf8"
)

var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("object not found")
	// ErrExists: PutIfAbsent found the key taken; nothing was written.
	ErrExists = errors.New("object already exists")
	// ErrConflict: the service refused a conditional request because another
	// one for the same key was in flight (S3's 409 ConditionalRequestConflict).
	// Nothing was written; retrying may succeed.
	ErrConflict = errors.New("conflicting concurrent request")
	// ErrUnavailable: the service failed the request (throttling, 5xx) or the
	// connection broke. Whether a write took effect is unknown.
	ErrUnavailable = errors.New("storage service unavailable")
	// ErrTimeout: the request timed out. Whether a write took effect is
	// unknown.
	ErrTimeout = errors.New("storage request timed out")
	// ErrRefused: the file backend found a symbolic link or a special file
	// (a FIFO, a device, a socket) where a key's object or one of its
	// directories should be, and neither followed nor opened it. The error
	// is a *RefusedError naming the entry. Not retryable: it stays until
	// whoever put the entry there removes it.
	ErrRefused = errors.New("refused: not a regular file or directory")
)

// RefusedError is the file backend's ErrRefused. Its message names keys
// only, never a path on the host or where a link points.
type RefusedError struct {
	// Op is the operation ("get", "read", "attributes", "create", "put",
	// "copy", "list", "delete") and Key the key (for List, the prefix) it
	// was asked for.
	Op, Key string
	// At is the key of the entry refused: Key itself, one of its
	// directories, its metadata sidecar (Key + ".attrs"), or, for List, an
	// entry under the prefix.
	At string
	// Kind says what the entry is: "a symbolic link", "a named pipe
	// (FIFO)", "a socket", "a device", or "an entry that changed while it
	// was being opened" when it was swapped between being looked at and
	// being opened.
	Kind string
}

func (e *RefusedError) Error() string {
	what := fmt.Sprintf("%q is %s", e.At, e.Kind)
	if e.At == e.Key {
		what = "it is " + e.Kind
	}
	return fmt.Sprintf("%s %q: refused: %s; the file store opens only regular files and directories and follows no symbolic links", e.Op, e.Key, what)
}

func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// IsRetryable reports whether err is transient: repeating the request may
// succeed. A retried write must tolerate that the first attempt may have
// taken effect (ErrUnavailable, ErrTimeout). A request a circuit breaker
// refused (ErrCircuitOpen) is not: the breaker says when to try again.
func IsRetryable(err error) bool {
	if errors.Is(err, ErrCircuitOpen) {
		return false
	}
	return errors.Is(err, ErrConflict) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTimeout)
}

// Attributes describe a stored object.
type Attributes struct {
	Size    int64
	ModTime time.Time
	// Metadata is the user metadata given at write time. Keys are lower case:
	// S3 folds them, so the other backends are held to the same rule.
	Metadata map[string]string
}

// Object is one entry of a listing.
type Object struct {
	Key  string
	Size int64
}

// Bucket is a flat key space of immutable-by-convention objects.
//
// Keys are '/'-separated paths: no leading, trailing or doubled '/', no '.'
// or '..' segments, no control characters, and not ending in ".attrs"
// (reserved by the file backend). Operations on an invalid key fail without
// touching storage.
type Bucket interface {
	// Get returns the whole object.
	Get(ctx context.Context, key string) ([]byte, error)
	// NewRangeReader reads length bytes from offset; length < 0 reads to the
	// end.
	NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	Attributes(ctx context.Context, key string) (Attributes, error)
	// PutIfAbsent creates key, or fails with ErrExists if it exists. Of any
	// number of concurrent calls for one key at most one succeeds.
	PutIfAbsent(ctx context.Context, key string, data []byte, metadata map[string]string) error
	// Put creates or replaces key. It is for derived data and checkpoints,
	// never for log objects.
	Put(ctx context.Context, key string, data []byte, metadata map[string]string) error
	// Copy copies src to dst (replacing dst) inside the service, metadata
	// included, without the bytes passing through this process where the
	// service allows it.
	Copy(ctx context.Context, dst, src string) error
	// List yields the objects whose keys start with prefix, in ascending key
	// order. Iteration stops at the first error, which is yielded, with one
	// exception: the file backend yields each symbolic link or special file
	// it meets as an ErrRefused error with the entry's key in Object.Key,
	// without following it, and goes on if the caller does.
	List(ctx context.Context, prefix string) iter.Seq2[Object, error]
	// Delete removes key; ErrNotFound if it does not exist. On the file
	// backend a key that is a symbolic link or a special file is removed
	// itself, never what a link points to.
	Delete(ctx context.Context, key string) error
	Close() error
}

// ValidateKey reports whether key is acceptable to every backend.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return errors.New("invalid object key: empty")
	case !utf8.ValidString(key):
		return fmt.Errorf("invalid object key %q: not UTF-8", key)
	case strings.HasSuffix(key, ".attrs"):
		return fmt.Errorf("invalid object key %q: the suffix .attrs is reserved", key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("invalid object key %q: control character or backslash", key)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("invalid object key %q: empty, '.' or '..' path segment", key)
		}
	}
	return nil
}

// validatePrefix accepts "" (everything) or a key prefix, which may end in '/'.
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := ValidateKey(strings.TrimSuffix(prefix, "/")); err != nil {
		return fmt.Errorf("invalid list prefix %q: %w", prefix, err)
	}
	return nil
}

func validateMetadata(md map[string]string) error {
	for k := range md {
		if k == "" || k != strings.ToLower(k) {
			return fmt.Errorf("invalid metadata key %q: must be non-empty lower case", k)
		}
	}
	return nil
}
