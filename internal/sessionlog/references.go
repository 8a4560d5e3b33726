package sessionlog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/turnlog/turnlog/internal/store"
)

// A fork's child refers to its source's segments instead of copying them
// (docs/log-format.md, "Forks by reference"). Its log/references.json
// names, range by range, the Sessions of its namespace whose segments hold
// its first seqs; everything after them is its own. Every reader in this
// package gets the segments through listSegments, which merges the
// referenced ranges with the log's own segments, so following references
// is done here and nowhere else.

// referencesName is the manifest's name under log/. It is not a segment
// name (20 digits and .jsonl), so a reader that predates references
// refuses such a log rather than reading half of it.
const referencesName = "references.json"

// maxReferences bounds a manifest: a fork adds at most one reference to
// its source's, so this is a lineage 1,024 forks deep.
const maxReferences = 1024

// maxReferencesBytes caps what a reader reads of a manifest.
const maxReferencesBytes = 1 << 20

// References is a log's manifest: the ranges of its seqs that other
// Sessions' segments hold, in order, from seq 0.
type References struct {
	Version int         `json:"version"`
	Refs    []Reference `json:"refs"`
}

// Reference says that the seqs after the previous reference's Through (from
// 0 for the first) through Through are the segments of the Session
// Session, uid UID, of the log's own namespace and store.
type Reference struct {
	Session string `json:"session"`
	UID     string `json:"uid"`
	Through int64  `json:"through"`
}

// referencesVersion is the manifest version this package reads and writes.
const referencesVersion = 1

// check reports what makes m unusable for the log at own.
func (m References) check(own Location) error {
	if m.Version != referencesVersion {
		return fmt.Errorf("version %d, want %d", m.Version, referencesVersion)
	}
	if len(m.Refs) == 0 || len(m.Refs) > maxReferences {
		return fmt.Errorf("%d references, want 1 to %d", len(m.Refs), maxReferences)
	}
	from := int64(0)
	for i, r := range m.Refs {
		if _, err := r.loc(own).Root(); err != nil {
			return fmt.Errorf("reference %d: %w", i, err)
		}
		if r.Session == own.Session && r.UID == own.UID {
			return fmt.Errorf("reference %d names the log itself", i)
		}
		if r.Through < from {
			return fmt.Errorf("reference %d ends at seq %d, before its range starts at seq %d", i, r.Through, from)
		}
		from = r.Through + 1
	}
	return nil
}

// Names reports whether the manifest refers to the Session session, uid
// uid.
func (m References) Names(session, uid string) bool {
	for _, r := range m.Refs {
		if r.Session == session && r.UID == uid {
			return true
		}
	}
	return false
}

// loc is where the referenced log is: beside own, in its namespace. A
// checked manifest's references all have a valid Root.
func (r Reference) loc(own Location) Location {
	return Location{Prefix: own.Prefix, Namespace: own.Namespace, Session: r.Session, UID: r.UID}
}

// end is the seq after the last one the references cover; 0 for none.
func (m References) end() int64 {
	if len(m.Refs) == 0 {
		return 0
	}
	return m.Refs[len(m.Refs)-1].Through + 1
}

// References returns the log's manifest; a log that refers to no other
// has none (zero References, no error).
func (l *Log) References(ctx context.Context) (References, error) {
	_, refs, err := l.listOwn(ctx)
	return refs, err
}

// manifestCache keeps decoded manifests by object key and size: a manifest
// is written once and never changed, and every listing of a child would
// otherwise read it again. Bounded; cleared whole when full.
var manifestCache = struct {
	sync.Mutex
	m map[string]References
}{m: map[string]References{}}

const manifestCacheEntries = 16384

// readReferences reads and checks the manifest at key, of the size the
// listing gave.
func (l *Log) readReferences(ctx context.Context, key string, size int64) (References, error) {
	ck := key + "\x00" + strconv.FormatInt(size, 10)
	manifestCache.Lock()
	m, ok := manifestCache.m[ck]
	manifestCache.Unlock()
	if ok {
		return m, nil
	}
	data, err := readLimited(ctx, l.b, key, maxReferencesBytes)
	if err != nil {
		return References{}, err
	}
	if m, err = decodeReferences(key, data, l.loc); err != nil {
		return References{}, err
	}
	manifestCache.Lock()
	if len(manifestCache.m) >= manifestCacheEntries {
		clear(manifestCache.m)
	}
	manifestCache.m[ck] = m
	manifestCache.Unlock()
	return m, nil
}

// decodeReferences decodes and checks the manifest data, stored at key,
// of the log at own: anything else is a *DataError naming key.
func decodeReferences(key string, data []byte, own Location) (References, error) {
	var m References
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return References{}, &DataError{Key: key, Msg: "not a references manifest: " + err.Error()}
	}
	if err := m.check(own); err != nil {
		return References{}, &DataError{Key: key, Msg: "references manifest refused: " + err.Error()}
	}
	return m, nil
}

// listOwn lists the log's own segments, in seq order, and reads its
// manifest if it has one.
func (l *Log) listOwn(ctx context.Context) ([]segment, References, error) {
	segs, manifest, err := listRoot(ctx, l.b, l.segmentPrefix(), nil)
	if err != nil {
		return nil, References{}, fmt.Errorf("list %s: %w", l.loc, err)
	}
	var refs References
	if manifest != nil {
		if refs, err = l.readReferences(ctx, manifest.Key, manifest.Size); err != nil {
			return nil, References{}, fmt.Errorf("list %s: %w", l.loc, err)
		}
	}
	return segs, refs, nil
}

// listRoot lists the segments under prefix (a root's log/) in key order,
// and the manifest object if there is one. stop, if not nil, ends the
// listing at the first segment it accepts: the keys come in seq order.
func listRoot(ctx context.Context, b store.Bucket, prefix string, stop func(first int64) bool) ([]segment, *store.Object, error) {
	var (
		segs     []segment
		manifest *store.Object
		err      error
		tries    budget
	)
	for {
		segs, manifest, err = segs[:0], nil, nil
		for o, lerr := range b.List(ctx, prefix) {
			if lerr != nil {
				err = lerr
				break
			}
			rest := strings.TrimPrefix(o.Key, prefix)
			if rest == referencesName {
				manifest = &o
				continue
			}
			first, ok := parseSegmentName(rest)
			if !ok {
				return nil, nil, &DataError{Key: o.Key, Msg: "not a segment name (want 20 digits and .jsonl)"}
			}
			if stop != nil && stop(first) {
				break
			}
			segs = append(segs, segment{key: o.Key, first: first, size: o.Size})
		}
		if err == nil {
			return segs, manifest, nil
		}
		var again bool
		if again, err = tries.again(ctx, err); !again {
			return nil, nil, err
		}
	}
}

// parseSegmentName returns the first seq of the segment named name
// (20 digits and .jsonl).
func parseSegmentName(name string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, ".jsonl")
	first, err := strconv.ParseInt(digits, 10, 64)
	return first, ok && len(digits) == 20 && err == nil && first >= 0
}

// listSegments lists the log's segments in seq order: the referenced
// ranges' and its own.
func (l *Log) listSegments(ctx context.Context) ([]segment, error) {
	segs, _, err := l.layout(ctx)
	return segs, err
}

// layout lists the log's segments in seq order, each referenced one with
// its reference, and returns the manifest they come from.
func (l *Log) layout(ctx context.Context) ([]segment, References, error) {
	own, refs, err := l.listOwn(ctx)
	if err != nil {
		return nil, References{}, err
	}
	segs, err := l.merged(ctx, own, refs)
	return segs, refs, err
}

// merged is the log's own segments with those of its references, in seq
// order, from seq 0.
func (l *Log) merged(ctx context.Context, own []segment, refs References) ([]segment, error) {
	segs := own
	if len(refs.Refs) > 0 {
		var err error
		if segs, err = l.withReferenced(ctx, own, refs); err != nil {
			return nil, fmt.Errorf("list %s: %w", l.loc, err)
		}
	}
	if len(segs) > 0 && segs[0].first != 0 {
		return nil, &DataError{Key: segs[0].key, Msg: "the log's first segment does not start at seq 0"}
	}
	return segs, nil
}

// withReferenced lists each referenced range's segments and merges them
// with the log's own, in seq order.
func (l *Log) withReferenced(ctx context.Context, own []segment, refs References) ([]segment, error) {
	var segs []segment
	from := int64(0)
	for i, r := range refs.Refs {
		loc := r.loc(l.loc)
		root, _ := loc.Root() // checked with the manifest
		through := r.Through
		got, _, err := listRoot(ctx, l.b, root+"log/", func(first int64) bool { return first > through })
		if err != nil {
			return nil, fmt.Errorf("referenced log %s: %w", loc, err)
		}
		start := sort.Search(len(got), func(k int) bool { return got[k].first >= from })
		got = got[start:]
		if len(got) == 0 || got[0].first != from {
			return nil, &DataError{Key: l.segmentPrefix() + referencesName,
				Msg: fmt.Sprintf("reference %d: Session %s (uid %s) has no segment starting at seq %d", i, r.Session, r.UID, from)}
		}
		for k := range got {
			got[k].ref, got[k].through = i+1, through
		}
		segs = append(segs, got...)
		from = through + 1
	}
	segs = append(segs, own...)
	sort.SliceStable(segs, func(a, b int) bool { return segs[a].first < segs[b].first })
	for k := 1; k < len(segs); k++ {
		if segs[k].first == segs[k-1].first {
			return nil, &DataError{Key: segs[k].key, Msg: fmt.Sprintf("overlap: %s starts at the same seq %d", segs[k-1].key, segs[k].first)}
		}
	}
	return segs, nil
}

// beyondReference reports a referenced segment holding a seq past its
// reference's range.
func beyondReference(seg segment, seq int64) error {
	return &DataError{Key: seg.key, Msg: fmt.Sprintf("holds seq %d, past the end of the reference to it (seq %d)", seq, seg.through), referenced: true}
}
