package sessionlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/turnlog/turnlog/internal/store"
)

// Liveness reports whether the Session whose log is at loc exists and is
// not being deleted. Deletion asks it before it deletes from a root other
// than the one it was asked to delete: a deleted mark that a host forged
// in a live Session's root must not cost that Session its log. nil asks
// nothing.
type Liveness func(ctx context.Context, loc Location) (bool, error)

// Delete removes the log at loc, and returns how many objects it removed.
// It lists exactly loc's root, which ends in '/', so another session's
// objects are never touched, with one exception that keeps forks by
// reference whole (docs/log-format.md, "Forks by reference"):
//
//   - the segments that children still refer to stay, with the children's
//     pins and a deleted mark, until the last of those children is
//     deleted;
//   - the log's own pins in the roots it refers to are removed, and what
//     a deleted one of those roots kept only for this log is deleted with
//     it (live is asked first).
//
// Every step can be repeated: a deletion that fails or is stopped half way
// is completed by the next.
//
// A symbolic link or special file a host put in the root of a file://
// store (the listing reports it, store.ErrRefused) is removed itself,
// never what it points to, so the root can be cleaned; one in place of a
// directory above the root is not the session's to remove, and fails the
// deletion.
func (s *Store) Delete(ctx context.Context, loc Location, live Liveness) (int, error) {
	root, err := loc.Root()
	if err != nil {
		return 0, err
	}
	keys, err := s.listRootKeys(ctx, loc, root)
	if err != nil {
		return 0, err
	}
	if len(keys) == 0 {
		return 0, nil
	}
	// The mark first: a fork that pins this root from now on finds it and
	// takes its pin back; one that pinned before is found below.
	err = retry(ctx, func() error { return s.bucket.Put(ctx, root+deletedName, []byte(`{"deleted":true}`), nil) })
	if errors.Is(err, store.ErrRefused) {
		// The root is a link or a special file a host planted: nothing
		// under it is a log anything refers to. It goes itself.
		return s.deleteKeys(ctx, loc, keys)
	}
	if err != nil {
		return 0, fmt.Errorf("delete %s: mark it deleted: %w", loc, err)
	}
	refs, err := s.childManifests(ctx, loc)
	if err != nil {
		return 0, fmt.Errorf("delete %s: %w", loc, err)
	}
	n := 0
	for _, m := range refs {
		for _, r := range m.Refs {
			rl := r.loc(loc)
			rroot, _ := rl.Root()
			if err := s.deleteKey(ctx, rroot+pinKey(loc.UID)); err != nil {
				return n, fmt.Errorf("delete %s: remove its pin in %s: %w", loc, rl, err)
			}
			k, err := s.collect(ctx, rl, live)
			n += k
			if err != nil {
				return n, fmt.Errorf("delete %s: %w", loc, err)
			}
		}
	}
	k, err := s.collect(ctx, loc, nil)
	return n + k, err
}

// collect deletes what is left of the deleted log at loc but for what its
// children's pins keep: the segments through the last seq a child refers
// to, and the transcript parts a child may share. A root not marked deleted, or whose Session live says is alive, is
// left alone. A pin that no child's manifest backs (forged, or left by a
// fork that did not finish) keeps nothing and is removed.
func (s *Store) collect(ctx context.Context, loc Location, live Liveness) (int, error) {
	gone, err := s.isDeleted(ctx, loc)
	if err != nil || !gone {
		return 0, err
	}
	if live != nil {
		alive, err := live(ctx, loc)
		if err != nil {
			return 0, fmt.Errorf("collect %s: is its Session alive: %w", loc, err)
		}
		if alive {
			return 0, nil
		}
	}
	root, _ := loc.Root()
	keys, err := s.listRootKeys(ctx, loc, root)
	if err != nil {
		return 0, err
	}
	keep := int64(-1) // the last seq a child refers to
	pinned := false
	var drop []string
	for _, k := range keys {
		uid, isPin := pinUID(root, k)
		if !isPin {
			continue
		}
		through, ok, err := s.pinNeeds(ctx, loc, root+k[len(root):], uid)
		if err != nil {
			return 0, fmt.Errorf("collect %s: %w", loc, err)
		}
		if !ok {
			drop = append(drop, k)
			continue
		}
		pinned = true
		keep = max(keep, through)
	}
	for _, k := range keys {
		switch {
		case k == root+deletedName:
			continue
		case pinned && strings.HasPrefix(k, root+pinsDir) && !slices.Contains(drop, k):
			continue
		case pinned && isOwnSegmentThrough(root, k, keep):
			continue
		case pinned && isTranscriptPart(root, k):
			continue
		}
		drop = append(drop, k)
	}
	n, err := s.deleteKeys(ctx, loc, drop)
	if err != nil || pinned {
		return n, err
	}
	// The mark last, and not counted: it is this deletion's own.
	if err := s.deleteKey(ctx, root+deletedName); err != nil {
		return n, fmt.Errorf("delete %s: %w", loc, err)
	}
	return n, nil
}

// pinNeeds reads the pin at key, for the child uid, and returns the last
// seq of loc's log that the child's manifest refers to; ok is false when
// no manifest of the child names loc.
func (s *Store) pinNeeds(ctx context.Context, loc Location, key, uid string) (int64, bool, error) {
	data, err := readLimited(ctx, s.bucket, key, 4<<10)
	if errors.Is(err, store.ErrNotFound) {
		return 0, false, nil
	}
	if _, bad := errors.AsType[*DataError](err); bad {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	var p pinRecord
	if json.Unmarshal(data, &p) != nil || p.UID != uid {
		return 0, false, nil
	}
	child := Location{Prefix: loc.Prefix, Namespace: loc.Namespace, Session: p.Session, UID: p.UID}
	if _, err := child.Root(); err != nil {
		return 0, false, nil
	}
	ms, err := s.childManifests(ctx, child)
	if err != nil {
		return 0, false, err
	}
	through, ok := int64(-1), false
	for _, m := range ms {
		for _, r := range m.Refs {
			if r.Session == loc.Session && r.UID == loc.UID {
				through, ok = max(through, r.Through), true
			}
		}
	}
	return through, ok, nil
}

// isOwnSegmentThrough: key is a segment of root's own log starting at or
// before through.
func isOwnSegmentThrough(root, key string, through int64) bool {
	name, ok := strings.CutPrefix(key, root+"log/")
	if !ok {
		return false
	}
	first, ok := parseSegmentName(name)
	return ok && first <= through
}

// isTranscriptPart: key is a part of one of root's stored transcripts,
// which a child may share (internal/derived, PartRef). A deleted root
// keeps them all while it is pinned: which ones a child lists changes
// with every run of the child's, and they are the source's derived data,
// a fraction of its log.
func isTranscriptPart(root, key string) bool {
	name, ok := strings.CutPrefix(key, root+"derived/transcript/")
	return ok && strings.HasSuffix(name, ".jsonl")
}

// listRootKeys lists every object under root.
func (s *Store) listRootKeys(ctx context.Context, loc Location, root string) ([]string, error) {
	// Collect first: deleting while a listing is in progress can make some
	// backends skip keys.
	var keys []string
	for o, err := range s.bucket.List(ctx, root) {
		if err != nil {
			if errors.Is(err, store.ErrRefused) && (o.Key+"/" == root || strings.HasPrefix(o.Key, root)) {
				keys = append(keys, o.Key)
				continue
			}
			return nil, fmt.Errorf("delete %s: %w", loc, err)
		}
		keys = append(keys, o.Key)
	}
	return keys, nil
}

// deleteKeys deletes keys of loc's root and returns how many it deleted.
func (s *Store) deleteKeys(ctx context.Context, loc Location, keys []string) (int, error) {
	// Several at a time, since stores answer one delete per request; and
	// ctx is looked at before each, because a store that answers every
	// delete at once would otherwise never let a deadline be noticed.
	var n atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(deleteConcurrency)
	for _, k := range keys {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			err := retry(gctx, func() error { return s.bucket.Delete(gctx, k) })
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if err == nil {
				n.Add(1)
			}
			return nil
		})
	}
	err := g.Wait()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return int(n.Load()), fmt.Errorf("delete %s (%d of %d objects deleted): %w", loc, n.Load(), len(keys), err)
	}
	return int(n.Load()), nil
}
