package compare

import (
	"context"
	"math"
)

// A fork's child holds its source's events 0..cut byte for byte (a fork by
// reference shares the very segments), so two Sessions of one fork tree
// are known to hold the same events through the smallest cut on the path
// between them, which their spec.forkedFrom records say without reading a
// log. A comparison then reads those events once, from one log, rather
// than from both to find that they agree (CompareFrom).

// maxLineage bounds how many forks up from each Session a lineage is
// followed: a record of one fork is one get from the API server.
const maxLineage = 32

// SessionRef is a Session as its log was opened: its namespace, name and
// uid (the log's Location).
type SessionRef struct {
	Namespace, Name, UID string
}

// ForkRecord is what a lineage walk needs of a Session: its uid, and what
// its spec.forkedFrom says (Source "" for a Session that is no fork's
// child).
type ForkRecord struct {
	UID       string
	Source    string
	SourceUID string
	Cut       int64
}

// Records looks up the record of a Session of the namespace walked, by
// name (cmdkit.ForkRecords reads them from the API server).
type Records func(ctx context.Context, name string) (ForkRecord, error)

// SharedThrough is the last seq the logs of a and b are known to share by
// their lineage: the smallest cut of the forks between them and their
// nearest common ancestor, found by following spec.forkedFrom up to
// maxLineage forks from each. It is -1 when they share no lineage found
// that way: other namespaces, a Session not found or of another uid than
// its log's or its child's record, a lookup that failed. CompareFrom then
// reads both logs from seq 0, as Compare does; the comparison is the same
// either way, only slower, so no lookup here is an error.
func SharedThrough(ctx context.Context, records Records, a, b SessionRef) int64 {
	if a.Namespace != b.Namespace {
		return -1
	}
	get := cached(records)
	return sharedThrough(ancestry(ctx, get, a), ancestry(ctx, get, b))
}

// cached looks each Session up once: the lineages of two Sessions of one
// tree meet, and the walk of the second goes over the first one's
// Sessions again.
func cached(records Records) Records {
	got := map[string]ForkRecord{}
	return func(ctx context.Context, name string) (ForkRecord, error) {
		if r, ok := got[name]; ok {
			return r, nil
		}
		r, err := records(ctx, name)
		if err != nil {
			return ForkRecord{}, err
		}
		got[name] = r
		return r, nil
	}
}

// ancestor is a Session of a lineage, by uid, and the last seq the
// Session the lineage starts from shares with it.
type ancestor struct {
	uid     string
	through int64
}

// ancestry is s and the Sessions it was forked from, nearest first, as far
// as the records check out: each Session got must have the uid its log or
// its child's record names. A source deleted since ends the walk, and is
// still an ancestor by the uid its children record: they hold its events
// through their cuts whether it is there or not.
func ancestry(ctx context.Context, get Records, s SessionRef) []ancestor {
	out := []ancestor{{uid: s.UID, through: math.MaxInt64}}
	name, uid := s.Name, s.UID
	for range maxLineage {
		r, err := get(ctx, name)
		if err != nil || r.UID != uid || r.Source == "" || r.SourceUID == "" {
			break
		}
		out = append(out, ancestor{uid: r.SourceUID, through: min(out[len(out)-1].through, r.Cut)})
		name, uid = r.Source, r.SourceUID
	}
	return out
}

// sharedThrough is what two ancestries say their Sessions share: the
// events through the smaller of the two bounds at the nearest ancestor
// they have in common, the first of a's that b has. It is -1 when they
// have none, or when a and b are one Session: then nothing was learnt.
func sharedThrough(a, b []ancestor) int64 {
	for _, x := range a {
		for _, y := range b {
			if x.uid != "" && x.uid == y.uid {
				if through := min(x.through, y.through); through < math.MaxInt64 {
					return through
				}
				return -1
			}
		}
	}
	return -1
}
