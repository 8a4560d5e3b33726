package sessionlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/turnlog/turnlog/internal/store"
)

// Objects of a root beside its log/ that forks by reference use
// (docs/log-format.md, "Forks by reference").
const (
	// pendingName is a fork's manifest while its pins are written and
	// checked: a pin counts only if the child's manifest, final or
	// pending, names the pinned root, and the child's deletion releases
	// the pins either names. Readers never read it.
	pendingName = "references.pending.json"
	// pinsDir holds one pin per child that refers to the root's segments.
	pinsDir = "pins/"
	// deletedName marks a root whose Session is deleted: what is left is
	// kept for pins only.
	deletedName = "deleted.json"
)

// ForkResult says how a fork seeded its child.
type ForkResult struct {
	// Referenced is how many of the child's first seqs are read through
	// references; the rest, through the cut, are the child's own.
	Referenced int64
	// CopiedBecause is why the fork copied the prefix instead of referring
	// to it ("" when it referred).
	CopiedBecause string
	// Written is what the fork wrote: bytes and objects under the child's
	// root and the pins in referenced roots (server-side copies count the
	// bytes they copied).
	WrittenBytes, WrittenObjects int64
}

// Fork makes dst's log hold src's events 0..cut without copying them: dst
// refers to src's segments (and to those src refers to, flattened) that
// end at or before cut, and only the segment holding cut, if cut is inside
// it, is written again into dst without its tail. src and dst must be in
// the same namespace and store. It never writes to src's log.
//
// Before dst's manifest counts, dst is recorded in each referenced root
// with a pin, and the fork checks that none of those Sessions has been
// deleted meanwhile; a referenced Session that is deleted (its root kept
// for other pins) is not referred to again, and the prefix is copied
// instead (CopyPrefix), which the result says.
//
// dst must be empty or hold what an earlier Fork with the same arguments
// wrote (which is then completed): anything else is
// ErrDestinationNotEmpty. A cut past src's last event is ErrBeyondHead.
func (s *Store) Fork(ctx context.Context, src, dst Location, cut int64, live Liveness) (ForkResult, error) {
	from, err := s.Log(src)
	if err != nil {
		return ForkResult{}, err
	}
	to, err := s.Log(dst)
	if err != nil {
		return ForkResult{}, err
	}
	if from.root == to.root {
		return ForkResult{}, fmt.Errorf("fork %s into itself", src)
	}
	if src.Prefix != dst.Prefix || src.Namespace != dst.Namespace {
		return ForkResult{}, fmt.Errorf("fork %s into %s: a fork by reference stays in its namespace and store", src, dst)
	}
	if cut < 0 {
		return ForkResult{}, fmt.Errorf("fork %s into %s: negative cut %d", src, dst, cut)
	}
	fail := func(err error) error { return fmt.Errorf("fork %s through seq %d into %s: %w", src, cut, dst, err) }

	plan, err := from.planPrefix(ctx, cut)
	if err != nil {
		return ForkResult{}, fail(err)
	}
	manifest := plan.references(src, cut)
	for _, r := range manifest.Refs {
		gone, err := s.isDeleted(ctx, r.loc(src))
		if err != nil {
			return ForkResult{}, fail(err)
		}
		if gone {
			return s.forkByCopy(ctx, src, dst, cut, fmt.Sprintf("Session %s (uid %s), which holds seqs of the prefix, is deleted", r.Session, r.UID))
		}
	}
	var res ForkResult
	if len(manifest.Refs) > 0 {
		res.Referenced = manifest.end()
		if err := s.checkForkDestination(ctx, to, manifest, plan.tail); err != nil {
			return ForkResult{}, fail(err)
		}
		data, _ := json.Marshal(manifest)
		if err := s.put(ctx, to.root+pendingName, data, &res); err != nil {
			return ForkResult{}, fail(err)
		}
		deleted, err := s.pin(ctx, dst, manifest, &res)
		if err != nil {
			return ForkResult{}, fail(err)
		}
		if deleted != nil {
			// Deleted between the check above and the pin: take the pins
			// back, so that the deleted root can go once its other
			// children do, and copy.
			if err := s.unpin(ctx, dst, manifest, live); err != nil {
				return ForkResult{}, fail(err)
			}
			if err := s.deleteKey(ctx, to.root+pendingName); err != nil {
				return ForkResult{}, fail(err)
			}
			return s.forkByCopy(ctx, src, dst, cut, fmt.Sprintf("Session %s (uid %s), which holds seqs of the prefix, was deleted while the fork referred to it", deleted.Session, deleted.UID))
		}
		if err := writeCopied(ctx, s.bucket, to.segmentPrefix()+referencesName, data, nil); err != nil {
			return ForkResult{}, fail(err)
		}
		res.WrittenBytes += int64(len(data))
		res.WrittenObjects++
	} else if err := s.checkForkDestination(ctx, to, manifest, plan.tail); err != nil {
		return ForkResult{}, fail(err)
	}
	// The segment holding the cut, written last: dst's head reaches the
	// cut only when the whole prefix is in place.
	for _, p := range plan.tail {
		if err := copyTailPiece(ctx, s.bucket, plan.segs[plan.i].key, to.segmentKey(p.first), p, nil); err != nil {
			return ForkResult{}, fail(err)
		}
		res.WrittenBytes += p.size
		res.WrittenObjects++
	}
	if len(manifest.Refs) > 0 {
		if err := s.deleteKey(ctx, to.root+pendingName); err != nil {
			return ForkResult{}, fail(err)
		}
	}
	return res, nil
}

// ForkReferences returns the manifest a Fork of src through seq cut would
// write for its child, without writing anything: what the child's pins
// will keep (none when the cut falls in the log's first segment, or the
// fork copies).
func (s *Store) ForkReferences(ctx context.Context, src Location, cut int64) (References, error) {
	from, err := s.Log(src)
	if err != nil {
		return References{}, err
	}
	plan, err := from.planPrefix(ctx, cut)
	if err != nil {
		return References{}, fmt.Errorf("plan a fork of %s through seq %d: %w", src, cut, err)
	}
	return plan.references(src, cut), nil
}

// forkByCopy copies the prefix, saying why.
func (s *Store) forkByCopy(ctx context.Context, src, dst Location, cut int64, why string) (ForkResult, error) {
	if err := s.CopyPrefix(ctx, src, dst, cut); err != nil {
		return ForkResult{}, err
	}
	return ForkResult{CopiedBecause: why}, nil
}

// references is the child's manifest: the plan's whole segments, run by
// run of one owner (the source, or a Session the source refers to).
func (p prefixPlan) references(src Location, cut int64) References {
	m := References{Version: referencesVersion}
	for k := range p.whole {
		seg := p.segs[k]
		r := Reference{Session: src.Session, UID: src.UID}
		if seg.ref > 0 {
			r = p.refs.Refs[seg.ref-1]
		}
		r.Through = cut
		if k+1 < len(p.segs) {
			r.Through = p.segs[k+1].first - 1
		}
		if n := len(m.Refs); n > 0 && m.Refs[n-1].Session == r.Session && m.Refs[n-1].UID == r.UID {
			m.Refs[n-1].Through = r.Through
			continue
		}
		m.Refs = append(m.Refs, r)
	}
	return m
}

// checkForkDestination: dst holds nothing, or only what this fork writes.
func (s *Store) checkForkDestination(ctx context.Context, to *Log, m References, tail []tailPiece) error {
	want := map[string]int64{to.root + pendingName: -1}
	for _, p := range tail {
		want[to.segmentKey(p.first)] = p.size
	}
	var refsKey string
	if len(m.Refs) > 0 {
		refsKey = to.segmentPrefix() + referencesName
		data, _ := json.Marshal(m)
		want[refsKey] = int64(len(data))
	}
	for o, err := range s.bucket.List(ctx, to.root) {
		if err != nil {
			return err
		}
		if notTheLog(to, o.Key) {
			continue
		}
		size, ok := want[o.Key]
		if !ok || size >= 0 && size != o.Size {
			return fmt.Errorf("%w: found %s", ErrDestinationNotEmpty, o.Key)
		}
	}
	return nil
}

// notTheLog: key is an object of l's root that a fork into it neither
// writes nor minds: derived data (a fork seeds the child's before its
// log), the pins of the child's own children, and the manifest the
// manager writes when it first sees the child.
func notTheLog(l *Log, key string) bool {
	return strings.HasPrefix(key, l.root+"derived/") || strings.HasPrefix(key, l.root+pinsDir) || key == l.root+manifestName
}

// pin records dst in each root m refers to, then checks that none of them
// is deleted; it returns the first that is.
func (s *Store) pin(ctx context.Context, dst Location, m References, res *ForkResult) (*Reference, error) {
	data, _ := json.Marshal(pinRecord{Session: dst.Session, UID: dst.UID})
	for _, r := range m.Refs {
		root, err := r.loc(dst).Root()
		if err != nil {
			return nil, err
		}
		if err := s.put(ctx, root+pinKey(dst.UID), data, res); err != nil {
			return nil, err
		}
	}
	// Only after every pin is written: a deletion that begins now finds
	// them; one that began before left its mark, found here.
	for _, r := range m.Refs {
		gone, err := s.isDeleted(ctx, r.loc(dst))
		if err != nil {
			return nil, err
		}
		if gone {
			return &r, nil
		}
	}
	return nil, nil
}

// unpin takes dst's pins out of the roots m refers to, and deletes what
// of a deleted root no pin keeps any more.
func (s *Store) unpin(ctx context.Context, dst Location, m References, live Liveness) error {
	for _, r := range m.Refs {
		loc := r.loc(dst)
		root, err := loc.Root()
		if err != nil {
			return err
		}
		if err := s.deleteKey(ctx, root+pinKey(dst.UID)); err != nil {
			return err
		}
		if _, err := s.collect(ctx, loc, live); err != nil {
			return err
		}
	}
	return nil
}

// pinRecord is a pin's content: the child it is for.
type pinRecord struct {
	Session string `json:"session"`
	UID     string `json:"uid"`
}

// pinKey is a child's pin under a root.
func pinKey(childUID string) string { return pinsDir + childUID + ".json" }

// isDeleted reports whether the log at loc is marked deleted.
func (s *Store) isDeleted(ctx context.Context, loc Location) (bool, error) {
	root, err := loc.Root()
	if err != nil {
		return false, err
	}
	var found bool
	err = retry(ctx, func() error {
		_, err := s.bucket.Attributes(ctx, root+deletedName)
		switch {
		case err == nil:
			found = true
		case errors.Is(err, store.ErrNotFound):
			found, err = false, nil
		}
		return err
	})
	return found, err
}

// put writes one small object, counting it.
func (s *Store) put(ctx context.Context, key string, data []byte, res *ForkResult) error {
	if err := retry(ctx, func() error { return s.bucket.Put(ctx, key, data, nil) }); err != nil {
		return err
	}
	res.WrittenBytes += int64(len(data))
	res.WrittenObjects++
	return nil
}

// deleteKey deletes one object; one already gone is not an error.
func (s *Store) deleteKey(ctx context.Context, key string) error {
	err := retry(ctx, func() error { return s.bucket.Delete(ctx, key) })
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// childManifests reads what the child at loc refers to: its manifest and
// the one it was pinning with, each if there and well formed.
func (s *Store) childManifests(ctx context.Context, loc Location) ([]References, error) {
	root, err := loc.Root()
	if err != nil {
		return nil, err
	}
	var out []References
	for _, key := range []string{root + "log/" + referencesName, root + pendingName} {
		data, err := readLimited(ctx, s.bucket, key, maxReferencesBytes)
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrRefused) {
			continue // none, or a link a host planted: it refers to nothing
		}
		if _, bad := errors.AsType[*DataError](err); bad {
			continue
		}
		if err != nil {
			return nil, err
		}
		m, err := decodeReferences(key, data, loc)
		if err != nil {
			continue // forged or torn: it refers to nothing
		}
		out = append(out, m)
	}
	return out, nil
}

// pinUID parses a pin's key under root: the child's uid.
func pinUID(root, key string) (string, bool) {
	name, ok := strings.CutPrefix(key, root+pinsDir)
	if !ok {
		return "", false
	}
	uid, ok := strings.CutSuffix(name, ".json")
	return uid, ok && uid != "" && !strings.Contains(uid, "/")
}
