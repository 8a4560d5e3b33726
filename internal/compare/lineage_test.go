package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// fork is what a child's spec.forkedFrom says: its source and its cut.
type fork struct {
	source string
	cut    int64
}

// namedRecord is a Session of team-a by name, as the API server records it.
type namedRecord struct {
	name string
	rec  ForkRecord
}

// forkedSession is Session team-a/name with the uid of location(name),
// forked from (if not nil) the Session of that uid.
func forkedSession(name string, from *fork) namedRecord {
	r := namedRecord{name: name, rec: ForkRecord{UID: location(name).UID}}
	if from != nil {
		r.rec.Source, r.rec.SourceUID, r.rec.Cut = from.source, location(from.source).UID, from.cut
	}
	return r
}

func sessionRef(name string) SessionRef {
	return SessionRef{Namespace: "team-a", Name: name, UID: location(name).UID}
}

// recordsOf looks sessions up by name, as cmdkit.ForkRecords does on the
// API server; a lookup of refuse fails, as a get the server refuses.
func recordsOf(refuse string, sessions ...namedRecord) Records {
	return func(_ context.Context, name string) (ForkRecord, error) {
		if name == refuse {
			return ForkRecord{}, errors.New("forbidden")
		}
		for _, s := range sessions {
			if s.name == name {
				return s.rec, nil
			}
		}
		return ForkRecord{}, errors.New("not found")
	}
}

// Where two ancestries, nearest first, meet: at the first of a's that b
// has, through the smaller of the two bounds there.
func TestSharedThroughAncestries(t *testing.T) {
	self := func(uid string) ancestor { return ancestor{uid: uid, through: math.MaxInt64} }
	for _, tc := range []struct {
		name string
		a, b []ancestor
		want int64
	}{
		{"a child and its source", []ancestor{self("child"), {"source", 40}}, []ancestor{self("source")}, 40},
		{"a source and its child", []ancestor{self("source")}, []ancestor{self("child"), {"source", 40}}, 40},
		{"siblings", []ancestor{self("early"), {"source", 11}}, []ancestor{self("late"), {"source", 40}}, 11},
		{"a grandchild and its grandparent", []ancestor{self("grandchild"), {"child", 30}, {"source", 20}}, []ancestor{self("source")}, 20},
		{"cousins meet at the nearest ancestor", []ancestor{self("x"), {"p", 50}, {"root", 10}}, []ancestor{self("y"), {"p", 60}, {"root", 10}}, 50},
		{"a child and its source's sibling", []ancestor{self("child"), {"early", 8}, {"source", 5}}, []ancestor{self("late"), {"source", 9}}, 5},
		{"one Session", []ancestor{self("source")}, []ancestor{self("source")}, -1},
		{"no ancestor in common", []ancestor{self("child"), {"source", 40}}, []ancestor{self("other"), {"else", 40}}, -1},
		{"records without a uid", []ancestor{self("early"), {"", 11}}, []ancestor{self("late"), {"", 40}}, -1},
	} {
		if got := sharedThrough(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// SharedThrough walks the Sessions' records, and finds nothing whenever a
// record does not check out.
func TestSharedThroughFromTheRecords(t *testing.T) {
	tree := []namedRecord{
		forkedSession("source", nil),
		forkedSession("child", &fork{"source", 40}),
		forkedSession("early", &fork{"source", 11}),
		forkedSession("grandchild", &fork{"child", 60}),
		forkedSession("great-grandchild", &fork{"grandchild", 30}),
		forkedSession("nephew", &fork{"early", 8}),
		forkedSession("orphan", &fork{"gone", 16}),
		forkedSession("orphan-sibling", &fork{"gone", 22}),
		forkedSession("unrelated", nil),
	}
	recreated := forkedSession("child", &fork{"source", 40})
	recreated.rec.UID = "another-uid"
	noUID := forkedSession("no-uid", &fork{"source", 40})
	noUID.rec.SourceUID = ""
	other := sessionRef("child")
	other.Namespace = "team-b"
	stale := sessionRef("child")
	stale.UID = "before-it-was-recreated"
	for _, tc := range []struct {
		name     string
		sessions []namedRecord
		refuse   string
		a, b     SessionRef
		want     int64
	}{
		{"a source and its child", tree, "", sessionRef("source"), sessionRef("child"), 40},
		{"a child and its source", tree, "", sessionRef("child"), sessionRef("source"), 40},
		{"siblings", tree, "", sessionRef("early"), sessionRef("child"), 11},
		{"a grandchild and its grandparent", tree, "", sessionRef("grandchild"), sessionRef("source"), 40},
		{"three forks down", tree, "", sessionRef("source"), sessionRef("great-grandchild"), 30},
		{"a grandchild and its parent's sibling's child", tree, "", sessionRef("grandchild"), sessionRef("nephew"), 8},
		{"children of a deleted source", tree, "", sessionRef("orphan"), sessionRef("orphan-sibling"), 16},
		{"no lineage in common", tree, "", sessionRef("child"), sessionRef("unrelated"), -1},
		{"one Session", tree, "", sessionRef("child"), sessionRef("child"), -1},
		{"other namespaces", tree, "", sessionRef("source"), other, -1},
		{"a Session not found", tree, "", sessionRef("source"), sessionRef("missing"), -1},
		{"a log opened before its Session was recreated", tree, "", sessionRef("source"), stale, -1},
		{"a source recreated under its name", []namedRecord{tree[0], recreated, tree[3]}, "", sessionRef("grandchild"), sessionRef("source"), -1},
		{"a record without the source's uid", []namedRecord{tree[0], noUID}, "", sessionRef("source"), sessionRef("no-uid"), -1},
		{"a get refused on the way", tree, "child", sessionRef("grandchild"), sessionRef("source"), -1},
		// The uid of a Session's log is its own: the Session need not be
		// got unless the walk goes on from it.
		{"a get refused at the end", tree, "source", sessionRef("child"), sessionRef("source"), 40},
	} {
		if got := SharedThrough(t.Context(), recordsOf(tc.refuse, tc.sessions...), tc.a, tc.b); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A lineage is followed maxLineage forks up and no further: a chain one
// fork longer is not known to share anything.
func TestSharedThroughIsBounded(t *testing.T) {
	chain := func(forks int) []namedRecord {
		out := []namedRecord{forkedSession("s0", nil)}
		for i := 1; i <= forks; i++ {
			out = append(out, forkedSession("s"+strconv.Itoa(i), &fork{"s" + strconv.Itoa(i-1), int64(100 - i)}))
		}
		return out
	}
	for _, tc := range []struct {
		forks int
		want  int64
	}{{maxLineage, 100 - maxLineage}, {maxLineage + 1, -1}} {
		if got := SharedThrough(t.Context(), recordsOf("", chain(tc.forks)...), sessionRef("s0"), sessionRef("s"+strconv.Itoa(tc.forks))); got != tc.want {
			t.Errorf("%d forks down: %d, want %d", tc.forks, got, tc.want)
		}
	}
}

// readFrom records the seqs a log is read from.
type readFrom struct {
	Log
	from *[]int64
}

func (r readFrom) Events(ctx context.Context, from int64) iter.Seq2[turnlog.Event, error] {
	*r.from = append(*r.from, from)
	return r.Log.Events(ctx, from)
}

// asJSON is a comparison, or its error, as a page gets it.
func asJSON(t *testing.T, c Comparison, err error) string {
	t.Helper()
	if err != nil {
		return "error: " + err.Error()
	}
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Comparing from where the lineage says two logs agree gives what
// comparing them from seq 0 gives: the same prefix, however far past the
// cut the logs still agree, and the same branches, whichever comes first.
// The second log is read only from there; a lineage the logs belie is
// not believed.
func TestCompareFromIsCompare(t *testing.T) {
	s := newSessions(t)
	s.write("chat", sample(t))
	// A child continued differently after its cut at the stopped turn.
	s.fork("chat", "chat-retry", 16)
	s.write("chat-retry", []byte(childTurns))
	// A child cut after turn 1 that goes on as its source did for two
	// turns, then with a turn 4 of its own: it agrees with the source,
	// and with chat-retry, through seq 17.
	lines := bytes.SplitAfter(sample(t), []byte("\n"))
	s.fork("chat", "chat-again", 4)
	s.write("chat-again", slices.Concat(slices.Concat(lines[5:17]...), []byte(strings.ReplaceAll(childTurns, "Only the first step, briefly.", "Just the first step."))))
	// A child cut at its source's last event: the same log.
	s.fork("chat", "chat-copy", 22)
	s.write("other", []byte(childTurns[:bytes.IndexByte([]byte(childTurns), '\n')+1]))
	s.replay("chat", "chat-retry", "chat-again")

	// sameThrough is the last seq the two logs agree on, -1 when they
	// share no whole turn.
	for _, tc := range []struct {
		name        string
		a, b        string
		same        int64
		sameThrough int64
	}{
		{"a source continued after the cut", "chat", "chat-retry", 16, 17},
		{"a child and its source", "chat-retry", "chat", 16, 17},
		{"a child going on as its source did", "chat", "chat-again", 4, 17},
		{"siblings agreeing past the nearer cut", "chat-again", "chat-retry", 4, 17},
		{"the same log", "chat", "chat-copy", 22, 22},
		{"a lineage the logs belie", "chat", "other", 16, -1},
		{"a lineage past both heads", "chat-retry", "chat-again", 40, 17},
	} {
		var fromA, fromB []int64
		a, b := s.branch(tc.a), s.branch(tc.b)
		c, err := Compare(t.Context(), a, b)
		if (err != nil) != (tc.sameThrough < 0) || err == nil && c.Shared.SameThroughSeq != tc.sameThrough {
			t.Fatalf("%s: from seq 0: shared %+v, %v; want the logs to agree through %d", tc.name, c.Shared, err, tc.sameThrough)
		}
		want := asJSON(t, c, err)
		a.Log, b.Log = readFrom{a.Log, &fromA}, readFrom{b.Log, &fromB}
		c, err = CompareFrom(t.Context(), a, b, tc.same)
		if got := asJSON(t, c, err); got != want {
			t.Errorf("%s: from seq %d\n%s\nfrom seq 0\n%s", tc.name, tc.same, got, want)
		}
		if tc.name == "a source continued after the cut" && (len(fromB) != 2 || fromB[0] != 16 || fromB[1] != 17) {
			t.Errorf("%s: the child's log read from seqs %v, want 16 (the cut) and 17 (its own turns)", tc.name, fromB)
		}
	}
}

// uncounted is a log whose workers kept no assembly state: a comparison
// counts its prefix from seq 0.
type uncounted struct{ Log }

func (uncounted) AssemblyAt(context.Context, int64) (derived.AssemblyState, bool, error) {
	return derived.AssemblyState{}, false, nil
}

// A comparison that starts counting the shared prefix from the assembly
// state the workers kept gives what counting it from seq 0 gives, for a
// long Session grown turn by turn and children cut all along it, and
// reads the source's log from at most a few thousand events before the
// cut.
func TestCountedPrefixIsTheLogs(t *testing.T) {
	s := newSessions(t)
	source := loggen.Log(12_000, 21)
	lines := bytes.SplitAfter(source, []byte("\n"))
	lines = lines[:len(lines)-1]
	var ends []int64 // the turn/ends' seqs
	for i, l := range lines {
		if bytes.Contains(l, []byte(`"type":"turn/end"`)) {
			ends = append(ends, int64(i))
		}
	}
	for from, k := 0, 25; from < len(lines); k += 25 {
		through := int(ends[min(k, len(ends)-1)])
		s.write("long", slices.Concat(lines[from:through+1]...))
		s.replay("long")
		from = through + 1
	}
	for i, cut := range []int64{ends[0], ends[len(ends)/3], ends[len(ends)/2], ends[len(ends)-2], ends[len(ends)-1]} {
		child := fmt.Sprint("long-", i)
		s.fork("long", child, cut)
		s.write(child, []byte(childTurn(turnOf(t, lines[cut])+1)))
		s.replay(child)
		for _, pair := range [][2]string{{"long", child}, {child, "long"}} {
			a, b := s.branch(pair[0]), s.branch(pair[1])
			c, err := CompareFrom(t.Context(), Branch{a.Name, uncounted{a.Log}}, Branch{b.Name, uncounted{b.Log}}, cut)
			want := asJSON(t, c, err)
			var read []int64
			c, err = CompareFrom(t.Context(), Branch{a.Name, readFrom{a.Log, &read}}, b, cut)
			got := asJSON(t, c, err)
			if got != want {
				t.Errorf("%s and %s cut at seq %d: counted from the kept state\n%s\ncounted from seq 0\n%s", pair[0], pair[1], cut, got, want)
			}
			if cut > 4096 && (len(read) == 0 || read[0] < cut-4096) {
				t.Errorf("%s and %s cut at seq %d: %s read from seqs %v, want from at most 4,096 before the cut", pair[0], pair[1], cut, pair[0], read)
			}
		}
	}
}

// childTurn is one turn of a child after its cut.
func childTurn(turn int64) string {
	return fmt.Sprintf("{\"type\":\"turn/start\",\"turn\":%d}\n{\"type\":\"user/message\",\"turn\":%d,\"content\":\"Another way.\"}\n{\"type\":\"turn/end\",\"turn\":%d,\"reason\":\"stop\"}\n", turn, turn, turn)
}

// turnOf is the turn of a log line.
func turnOf(t *testing.T, line []byte) int64 {
	t.Helper()
	var e struct{ Turn int64 }
	if err := json.Unmarshal(line, &e); err != nil {
		t.Fatal(err)
	}
	return e.Turn
}
