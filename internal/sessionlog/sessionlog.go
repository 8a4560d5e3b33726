// Package sessionlog keeps a session's turn log in an object-store bucket.
//
// A log lives under its Location's root, <prefix>/<namespace>/<session>/<uid>/:
//
//	log/00000000000000000000.jsonl   segments: immutable batches of events,
//	log/00000000000000000042.jsonl   named by their first seq (zero-padded, so
//	...                              key order is seq order)
//	derived/...                      assembly output, checkpoints
//
// Segments are created with store.Bucket.PutIfAbsent, so of two writers
// racing for the same seq exactly one wins; the loser reads the winner's
// segment and tries again after it. Each segment carries its writer's token
// in the object metadata, which is how a writer whose request timed out
// recognises that its write did land. docs/log-format.md ("Storage layout")
// describes the protocol for writers in other languages.
package sessionlog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// metaWriter is the segment metadata key holding the writer token.
const metaWriter = "turnlog-writer"

// Bounds on what the bucket holds, so that no object a writer (or a
// tenant) put there can make a reader hold more than a few of them in
// memory. docs/log-format.md documents them for writers in other languages.
const (
	// MaxLineBytes is the longest line of a segment, its newline not
	// counted: the line limit of the log format.
	MaxLineBytes = turnlog.MaxLineBytes
	// MaxSegmentBytes is the largest segment: writers never create a
	// larger one, and readers refuse one with a *DataError naming it.
	MaxSegmentBytes = 64 << 20
	// SplitBytes is where an append splits its batch: events are written
	// in segments of at most this many bytes (a single larger event, up to
	// MaxLineBytes, gets a segment of its own). Well below
	// MaxSegmentBytes, so a batch split at any event boundary fits.
	SplitBytes = 4 << 20
	// MaxDerivedBytes is the largest derived object GetDerived returns.
	MaxDerivedBytes = MaxSegmentBytes
)

var (
	// ErrStaleWriter: an append with an expected head found the log's head
	// elsewhere. The error is a *StaleWriterError.
	ErrStaleWriter = errors.New("stale writer")
	// ErrOutcomeUnknown: an append gave up after a request whose outcome is
	// unknown; its events may or may not be in the log.
	ErrOutcomeUnknown = errors.New("append outcome unknown")
	// ErrBeyondHead: a seq past the log's last event.
	ErrBeyondHead = errors.New("seq beyond the log's head")
	// ErrDestinationNotEmpty: a prefix copy found objects in its destination
	// that are not the ones it would write.
	ErrDestinationNotEmpty = errors.New("destination log is not empty")
)

// StaleWriterError says where the log's head really is.
type StaleWriterError struct {
	// Expected is the seq the writer meant to write; Next is the seq the
	// log's next event will get.
	Expected, Next int64
}

func (e *StaleWriterError) Error() string {
	return fmt.Sprintf("stale writer: expected to append at seq %d, but the log's next seq is %d", e.Expected, e.Next)
}

func (e *StaleWriterError) Is(target error) bool { return target == ErrStaleWriter }

// DataError is bad data found in the bucket.
type DataError struct {
	Key string
	// Line is 1-based; 0 when the problem is the object as a whole.
	Line int
	// Seq is the seq the line should have.
	Seq int64
	Msg string
	// referenced: Key is a segment read through a reference.
	referenced bool
}

func (e *DataError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("bad log data: %s: %s", e.Key, e.Msg)
	}
	return fmt.Sprintf("bad log data: %s line %d (seq %d): %s", e.Key, e.Line, e.Seq, e.Msg)
}

// InReferences reports whether the bad data is the log's references
// manifest, or what it refers to: a fork's child's prefix, which only the
// manager writes (docs/log-format.md, "Forks by reference").
func (e *DataError) InReferences() bool {
	return strings.HasSuffix(e.Key, "/log/"+referencesName) || e.referenced
}

// Location names one session's log. Namespace, Session and UID come from
// the Session object: the UID keeps a deleted-and-recreated session from
// seeing its predecessor's log.
type Location struct {
	// Prefix is the bucket-wide prefix, "" for none; it may contain '/'.
	Prefix    string
	Namespace string
	Session   string
	UID       string
}

// Root returns the key prefix of everything the location holds, ending in
// '/' so that it never matches another session whose name merely starts
// with this one's.
func (l Location) Root() (string, error) {
	if l.Prefix != "" {
		if err := store.ValidateKey(l.Prefix); err != nil {
			return "", fmt.Errorf("location prefix: %w", err)
		}
	}
	for _, c := range []struct{ name, v string }{{"namespace", l.Namespace}, {"session", l.Session}, {"uid", l.UID}} {
		if c.v == "" || strings.Contains(c.v, "/") || store.ValidateKey(c.v) != nil {
			return "", fmt.Errorf("location %s %q: must be a non-empty name without '/'", c.name, c.v)
		}
	}
	root := l.Namespace + "/" + l.Session + "/" + l.UID + "/"
	if l.Prefix != "" {
		root = l.Prefix + "/" + root
	}
	return root, nil
}

func (l Location) String() string {
	return strings.TrimPrefix(l.Prefix+"/"+l.Namespace+"/"+l.Session+"/"+l.UID, "/")
}

// Store keeps session logs in one bucket.
type Store struct {
	bucket store.Bucket
}

// New returns a Store on b.
func New(b store.Bucket) *Store { return &Store{bucket: b} }

// Log is one session's log. Its methods are safe for concurrent use.
type Log struct {
	b    store.Bucket
	loc  Location
	root string
}

// Log returns the log at loc; it need not exist yet.
func (s *Store) Log(loc Location) (*Log, error) {
	root, err := loc.Root()
	if err != nil {
		return nil, err
	}
	return &Log{b: s.bucket, loc: loc, root: root}, nil
}

// Location returns where the log is.
func (l *Log) Location() Location { return l.loc }

func (l *Log) segmentPrefix() string { return l.root + "log/" }

func (l *Log) segmentKey(first int64) string {
	return fmt.Sprintf("%s%020d.jsonl", l.segmentPrefix(), first)
}

// PutDerived stores data derived from the log (assembly output, a
// checkpoint) under derived/name, replacing any previous version. name is a
// relative '/'-separated path. Derived data can never overwrite the log.
func (l *Log) PutDerived(ctx context.Context, name string, data []byte) error {
	key, err := l.derivedKey(name)
	if err != nil {
		return err
	}
	if err := l.b.Put(ctx, key, data, nil); err != nil {
		return fmt.Errorf("store derived %q of %s: %w", name, l.loc, err)
	}
	return nil
}

// DeleteDerived removes what PutDerived stored under name; nothing stored
// there is not an error.
func (l *Log) DeleteDerived(ctx context.Context, name string) error {
	key, err := l.derivedKey(name)
	if err != nil {
		return err
	}
	if err := l.b.Delete(ctx, key); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("delete derived %q of %s: %w", name, l.loc, err)
	}
	return nil
}

// GetDerived returns what PutDerived stored, if it is at most limit bytes
// (at most MaxDerivedBytes; limit <= 0 means MaxDerivedBytes): a larger
// object is a *DataError naming it and its size, read no further than the
// limit. An error wrapping store.ErrNotFound if nothing was stored.
func (l *Log) GetDerived(ctx context.Context, name string, limit int64) ([]byte, error) {
	key, err := l.derivedKey(name)
	if err != nil {
		return nil, err
	}
	if limit <= 0 || limit > MaxDerivedBytes {
		limit = MaxDerivedBytes
	}
	data, err := readLimited(ctx, l.b, key, limit)
	if err != nil {
		return nil, fmt.Errorf("read derived %q of %s: %w", name, l.loc, err)
	}
	return data, nil
}

// CopyDerivedFrom copies src's derived object name to the same name in l's
// derived data, inside the storage service: how a fork's child starts from
// its source's derived data without its bytes passing through the process.
// An error wrapping store.ErrNotFound if src has no such object.
func (l *Log) CopyDerivedFrom(ctx context.Context, src *Log, name string) error {
	key, err := l.derivedKey(name)
	if err != nil {
		return err
	}
	from, err := src.derivedKey(name)
	if err != nil {
		return err
	}
	if err := retry(ctx, func() error { return l.b.Copy(ctx, key, from) }); err != nil {
		return fmt.Errorf("copy derived %q of %s to %s: %w", name, src.loc, l.loc, err)
	}
	return nil
}

// Beside returns the log of the Session session, uid uid, of l's
// namespace and store: where a fork's child reads the derived data it
// shares with its source (docs/log-format.md, "Forks by reference"). The
// names come from derived data anyone who can write the bucket can forge,
// so a name that is not a Session's is an error, and the log can never be
// outside l's namespace.
func (l *Log) Beside(session, uid string) (*Log, error) {
	loc := Location{Prefix: l.loc.Prefix, Namespace: l.loc.Namespace, Session: session, UID: uid}
	root, err := loc.Root()
	if err != nil {
		return nil, err
	}
	return &Log{b: l.b, loc: loc, root: root}, nil
}

// ListDerived returns the names of the derived objects under dir (a
// relative '/'-separated path), in key order.
func (l *Log) ListDerived(ctx context.Context, dir string) ([]string, error) {
	prefix, err := l.derivedKey(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return nil, err
	}
	prefix += "/"
	var names []string
	for o, err := range l.b.List(ctx, prefix) {
		if err != nil {
			return nil, fmt.Errorf("list derived %q of %s: %w", dir, l.loc, err)
		}
		names = append(names, strings.TrimPrefix(o.Key, l.root+"derived/"))
	}
	return names, nil
}

// Pinned reports whether a fork's child has pinned the log: whether
// another Session may refer to its segments and share its derived data.
func (l *Log) Pinned(ctx context.Context) (bool, error) {
	for _, err := range l.b.List(ctx, l.root+pinsDir) {
		if err != nil {
			return false, fmt.Errorf("list the pins of %s: %w", l.loc, err)
		}
		return true, nil
	}
	return false, nil
}

func (l *Log) derivedKey(name string) (string, error) {
	if err := store.ValidateKey(name); err != nil {
		return "", fmt.Errorf("derived data name: %w", err)
	}
	return l.root + "derived/" + name, nil
}

// deleteConcurrency is how many deletes of one root run at once.
const deleteConcurrency = 8
