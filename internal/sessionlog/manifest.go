package sessionlog

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"

	"github.com/turnlog/turnlog/internal/store"
)

// manifestName is a Session's manifest beside its log: what the manager
// wrote of the Session object (namespace, name, uid, spec, lineage), so
// that a cluster that lost the object can adopt the log again. Its format
// is the manager's (internal/sessionio); here it is bytes.
const manifestName = "session.json"

// MaxManifestBytes bounds a manifest: a Session object's spec and labels
// are a few KiB; anything larger was not written by the manager.
const MaxManifestBytes = 256 << 10

// PutManifest stores the Session's manifest beside its log, replacing the
// previous one. It is never part of the log.
func (l *Log) PutManifest(ctx context.Context, data []byte) error {
	if len(data) > MaxManifestBytes {
		return fmt.Errorf("the manifest of %s is %d bytes, over %d", l.loc, len(data), MaxManifestBytes)
	}
	return retry(ctx, func() error { return l.b.Put(ctx, l.root+manifestName, data, nil) })
}

// Manifest reads the Session's manifest; ErrNotFound if there is none.
func (l *Log) Manifest(ctx context.Context) ([]byte, error) {
	data, err := readLimited(ctx, l.b, l.root+manifestName, MaxManifestBytes)
	if err != nil {
		return nil, fmt.Errorf("read the manifest of %s: %w", l.loc, err)
	}
	return data, nil
}

// DeleteManifestIfAlone deletes the root's manifest when it is all the
// root holds, and reports whether it did: the manifest a restored Session
// wrote before it was pointed at its old log, which would otherwise be
// found again as a Session with no log.
func (l *Log) DeleteManifestIfAlone(ctx context.Context) (bool, error) {
	for o, err := range l.b.List(ctx, l.root) {
		if err != nil {
			return false, fmt.Errorf("list %s: %w", l.loc, err)
		}
		if o.Key != l.root+manifestName {
			return false, nil
		}
	}
	err := retry(ctx, func() error { return l.b.Delete(ctx, l.root+manifestName) })
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("delete the manifest of %s: %w", l.loc, err)
	}
	return err == nil, nil
}

// Root is what a listing of the store found of one Session's root.
type Root struct {
	Location Location
	// Manifest: the root holds the manager's manifest of its Session.
	Manifest bool
	// Log: the root holds a log (a segment, or the references of a fork).
	Log bool
	// Deleted: the root's Session was deleted; what is left is kept for
	// its children's pins only.
	Deleted bool
}

// Roots lists the roots of the Sessions under prefix ("" for none), of
// namespace alone if it is not "", in key order. It reads one listing of
// the store, page by page, and holds one root at a time, so its memory
// does not grow with the number of Sessions. A key that is not inside a
// root (a stray object, a name that is not one) is skipped.
func (s *Store) Roots(ctx context.Context, prefix, namespace string) iter.Seq2[Root, error] {
	return func(yield func(Root, error) bool) {
		base := ""
		if prefix != "" {
			if err := store.ValidateKey(prefix); err != nil {
				yield(Root{}, fmt.Errorf("prefix %q: %w", prefix, err))
				return
			}
			base = prefix + "/"
		}
		from := base
		if namespace != "" {
			from += namespace + "/"
		}
		var cur Root
		curRoot := ""
		for o, err := range s.bucket.List(ctx, from) {
			if err != nil && !errors.Is(err, store.ErrRefused) {
				yield(Root{}, fmt.Errorf("list %q: %w", from, err))
				return
			}
			parts := strings.SplitN(strings.TrimPrefix(o.Key, base), "/", 4)
			if len(parts) < 4 {
				continue
			}
			loc := Location{Prefix: prefix, Namespace: parts[0], Session: parts[1], UID: parts[2]}
			root, err := loc.Root()
			if err != nil {
				continue
			}
			if root != curRoot {
				if curRoot != "" && !yield(cur, nil) {
					return
				}
				cur, curRoot = Root{Location: loc}, root
			}
			switch rest := parts[3]; {
			case rest == manifestName:
				cur.Manifest = true
			case rest == deletedName:
				cur.Deleted = true
			case strings.HasPrefix(rest, "log/"):
				cur.Log = true
			}
		}
		if curRoot != "" {
			yield(cur, nil)
		}
	}
}
