package sessionlog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
)

// fixtureDir is the fork tree every reader, in every language, reads to
// the same bytes (testdata/stores/forked/README.md).
const fixtureDir = "../../testdata/stores/forked"

// TestForkTreeFixture reads the shared fixture's three Sessions, a plain
// log, a fork and a fork of that fork by reference, to exactly the bytes
// its expected/ holds, as `turnlog export` prints them.
func TestForkTreeFixture(t *testing.T) {
	b := storetest.Open(t, "file://"+copyTree(t, filepath.Join(fixtureDir, "store")), nil)
	for _, tc := range []struct{ session, uid string }{{"src", "u1"}, {"mid", "u2"}, {"leaf", "u3"}} {
		want, err := os.ReadFile(filepath.Join(fixtureDir, "expected", tc.session+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		lg := openLog(t, b, sessionlog.Location{Namespace: "ns", Session: tc.session, UID: tc.uid})
		if got := export(t, lg); got != string(want) {
			t.Errorf("%s reads\n%s\nwant\n%s", tc.session, got, want)
		}
	}
}

// copyTree copies dir to a temporary directory: the file store writes
// beside what it reads (its temporary files), and the fixture stays as
// committed.
func copyTree(t testing.TB, dir string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// export is the log as `turnlog export` prints it: every line, in order.
func export(t testing.TB, lg *sessionlog.Log) string {
	t.Helper()
	var sb strings.Builder
	for _, e := range readAll(t, lg) {
		sb.Write(e.Line)
		sb.WriteByte('\n')
	}
	return sb.String()
}

// TestForgedReferencesAreRefused: a manifest a host forged is bad data
// naming it, in one line; it never makes a reader leave the namespace.
func TestForgedReferencesAreRefused(t *testing.T) {
	for _, tc := range []struct{ name, manifest, want string }{
		{"not JSON", `{"version":1,`, "not a references manifest"},
		{"unknown member", `{"version":1,"refs":[{"session":"src","uid":"u1","through":5,"namespace":"other"}]}`, "unknown field"},
		{"another version", `{"version":2,"refs":[{"session":"src","uid":"u1","through":5}]}`, "version 2"},
		{"no refs", `{"version":1,"refs":[]}`, "0 references"},
		{"a path", `{"version":1,"refs":[{"session":"../other","uid":"u1","through":5}]}`, "must be a non-empty name without '/'"},
		{"dot dot", `{"version":1,"refs":[{"session":"..","uid":"u1","through":5}]}`, "session"},
		{"itself", `{"version":1,"refs":[{"session":"leaf","uid":"u3","through":5}]}`, "names the log itself"},
		{"ranges out of order", `{"version":1,"refs":[{"session":"src","uid":"u1","through":5},{"session":"mid","uid":"u2","through":3}]}`, "before its range starts"},
		{"a range past the segments", `{"version":1,"refs":[{"session":"src","uid":"u1","through":7}]}`, "past the end of the reference"},
		{"a missing Session", `{"version":1,"refs":[{"session":"gone","uid":"u9","through":5}]}`, "has no segment starting at seq 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyTree(t, filepath.Join(fixtureDir, "store"))
			manifest := filepath.Join(dir, "ns", "leaf", "u3", "log", "references.json")
			if err := os.WriteFile(manifest, []byte(tc.manifest), 0o644); err != nil {
				t.Fatal(err)
			}
			lg := openLog(t, storetest.Open(t, "file://"+dir, nil), sessionlog.Location{Namespace: "ns", Session: "leaf", UID: "u3"})
			var err error
			for _, e := range lg.Read(ctx(t), 0, 1<<62) {
				if e != nil {
					err = e
				}
			}
			if _, bad := errors.AsType[*sessionlog.DataError](err); !bad || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("read: %v; want one line of bad log data saying %q", err, tc.want)
			}
			if tc.name != "a range past the segments" && !strings.Contains(err.Error(), "ns/leaf/u3/log/") {
				t.Errorf("the error does not name the manifest's log: %v", err)
			}
		})
	}
}

// TestForkWritesTheCutSegmentAlone: a fork of a long log writes its
// manifest, a pin and the segment holding the cut, however many segments
// the source has, and the requests it makes do not grow with them.
func TestForkWritesTheCutSegmentAlone(t *testing.T) {
	requests := map[int]int64{}
	for _, segments := range []int{10, 100, 1000} {
		c := storetest.NewCounting(storetest.Open(t, "mem://", nil))
		s := sessionlog.New(c)
		src := sessionlog.Location{Namespace: "ns", Session: "long", UID: "u-src"}
		app := openLog(t, c, src).NewAppender("w")
		for i := range segments {
			if _, err := app.Append(ctx(t), ev("turn/start", i+1, ""), ev("user/message", i+1, `,"content":"`+strings.Repeat("x", 500)+`"`), ev("turn/end", i+1, `,"reason":"stop"`)); err != nil {
				t.Fatal(err)
			}
		}
		cut := int64(3*segments - 5) // inside the second-to-last segment
		c.Reset()
		dst := sessionlog.Location{Namespace: "ns", Session: fmt.Sprint("child-", segments), UID: "u-child"}
		res, err := s.Fork(ctx(t), src, dst, cut, nil)
		if err != nil {
			t.Fatal(err)
		}
		counts := c.Counts()
		requests[segments] = counts.Requests() - counts.ListPages
		if res.CopiedBecause != "" || res.Referenced != cut-1 || res.WrittenObjects != 4 || res.WrittenBytes > 2<<10 {
			t.Errorf("%d segments: fork %+v; want seqs 0..%d referred to and 4 small objects written (pending manifest, pin, manifest, cut segment)", segments, res, cut-2)
		}
		child := openLog(t, c, dst)
		if got, want := export(t, child), exportThrough(t, openLog(t, c, src), cut); got != want {
			t.Fatalf("%d segments: the child does not read as the source's prefix", segments)
		}
	}
	if requests[10] != requests[1000] {
		t.Errorf("requests but listings per fork: %v; want the same for 10 and 1,000 segments", requests)
	}
}

func exportThrough(t testing.TB, lg *sessionlog.Log, cut int64) string {
	var sb strings.Builder
	for _, e := range readAll(t, lg) {
		if e.Seq <= cut {
			sb.Write(e.Line)
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// treeSession is what the property test expects of one Session.
type treeSession struct {
	loc   sessionlog.Location
	lines [][]byte // the log, line by line
	// alive: the Session exists; retained: deleted with retention Retain,
	// its log kept.
	alive, retained bool
}

// TestForkTreesProperty drives random fork trees through appends, forks at
// random cuts (forks of forks included), deletions in every order with
// both retentions, and a manager that dies mid-fork and mid-delete and is
// started again. After every step each Session's log, and each retained
// log, reads as its expected events byte for byte; once everything is
// deleted, nothing is left under the prefix.
func TestForkTreesProperty(t *testing.T) {
	steps := map[string]int{"mem": 400, "file": 200, "versitygw": 80}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.open(t)
			for seed := uint64(1); seed <= 3; seed++ {
				runForkTree(t, b, seed, steps[be.name])
			}
		})
	}
}

func runForkTree(t *testing.T, b store.Bucket, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	prefix := fmt.Sprintf("tree-%d", seed)
	var sessions []*treeSession
	byUID := map[string]*treeSession{}
	live := func(_ context.Context, loc sessionlog.Location) (bool, error) {
		s := byUID[loc.UID]
		return s != nil && s.alive, nil
	}
	newSession := func() *treeSession {
		n := len(sessions)
		s := &treeSession{loc: sessionlog.Location{Prefix: prefix, Namespace: "ns", Session: fmt.Sprint("s", n), UID: fmt.Sprintf("uid-%d", n)}, alive: true}
		sessions = append(sessions, s)
		byUID[s.loc.UID] = s
		return s
	}
	pick := func(ok func(*treeSession) bool) *treeSession {
		var c []*treeSession
		for _, s := range sessions {
			if ok(s) {
				c = append(c, s)
			}
		}
		if len(c) == 0 {
			return nil
		}
		return c[rng.IntN(len(c))]
	}
	appendTo := func(s *treeSession) {
		lg := openLog(t, b, s.loc)
		batch := make([][]byte, 1+rng.IntN(4))
		for i := range batch {
			batch[i] = ev("user/message", 1, fmt.Sprintf(`,"content":"%s"`, strings.Repeat("y", rng.IntN(40))))
		}
		first, err := lg.NewAppender("").Append(ctx(t), batch...)
		if err != nil {
			t.Fatalf("seed %d: append to %s: %v", seed, s.loc.Session, err)
		}
		for i, e := range batch {
			s.lines = append(s.lines, fmt.Appendf(nil, `{"seq":%d,%s`, first+int64(i), e[1:]))
		}
	}
	// dying runs op against a manager that dies after a few requests, then
	// again against one that does not: what a restarted manager does.
	dying := func(op func(s *sessionlog.Store) error) error {
		d := storetest.NewDying(b, int64(rng.IntN(12)))
		if err := op(sessionlog.New(d)); err == nil {
			return nil
		}
		return op(sessionlog.New(b))
	}
	check := func(step int, what string) {
		t.Helper()
		for _, s := range sessions {
			if !s.alive && !s.retained {
				continue
			}
			var want bytes.Buffer
			for _, l := range s.lines {
				want.Write(l)
				want.WriteByte('\n')
			}
			lg := openLog(t, b, s.loc)
			var got bytes.Buffer
			for e, err := range lg.Read(ctx(t), 0, 1<<62) {
				if err != nil {
					t.Fatalf("seed %d step %d (%s): read %s: %v", seed, step, what, s.loc.Session, err)
				}
				got.Write(e.Line)
				got.WriteByte('\n')
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Fatalf("seed %d step %d (%s): %s reads %d bytes, want %d:\n%s\nwant\n%s", seed, step, what, s.loc.Session, got.Len(), want.Len(), got.Bytes(), want.Bytes())
			}
		}
	}
	for step := range steps {
		var what string
		switch r := rng.IntN(10); {
		case r < 1 || len(sessions) == 0:
			s := newSession()
			appendTo(s)
			what = "new " + s.loc.Session
		case r < 5:
			s := pick(func(s *treeSession) bool { return s.alive })
			if s == nil {
				continue
			}
			appendTo(s)
			what = "append to " + s.loc.Session
		case r < 8:
			src := pick(func(s *treeSession) bool { return s.alive && len(s.lines) > 0 })
			if src == nil {
				continue
			}
			cut := int64(rng.IntN(len(src.lines)))
			child := newSession()
			child.lines = slices.Clone(src.lines[:cut+1])
			what = fmt.Sprintf("fork %s at %d into %s", src.loc.Session, cut, child.loc.Session)
			if err := dying(func(s *sessionlog.Store) error {
				_, err := s.Fork(ctx(t), src.loc, child.loc, cut, live)
				return err
			}); err != nil {
				t.Fatalf("seed %d step %d: %s: %v", seed, step, what, err)
			}
		default:
			s := pick(func(s *treeSession) bool { return s.alive })
			if s == nil {
				continue
			}
			s.alive = false
			if rng.IntN(4) == 0 {
				s.retained = true
				what = "delete " + s.loc.Session + " with Retain"
				break
			}
			what = "delete " + s.loc.Session
			if err := dying(func(st *sessionlog.Store) error {
				_, err := st.Delete(ctx(t), s.loc, live)
				return err
			}); err != nil {
				t.Fatalf("seed %d step %d: %s: %v", seed, step, what, err)
			}
		}
		check(step, what)
	}
	// Everything goes, retained logs too (an operator's clean-up), in a
	// random order.
	rng.Shuffle(len(sessions), func(i, j int) { sessions[i], sessions[j] = sessions[j], sessions[i] })
	for _, s := range sessions {
		if s.alive || s.retained {
			s.alive, s.retained = false, false
			if _, err := sessionlog.New(b).Delete(ctx(t), s.loc, live); err != nil {
				t.Fatalf("seed %d: final delete of %s: %v", seed, s.loc.Session, err)
			}
		}
	}
	for o, err := range b.List(ctx(t), prefix+"/") {
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("seed %d: %s left after every Session of the tree was deleted", seed, o.Key)
	}
}

// TestChildHeadListsNoReference: the head of a child that has gone on is
// found among its own segments, without listing the Sessions it refers
// to, whose listings grow with their history: the manager reads every
// Session's head at each poll.
func TestChildHeadListsNoReference(t *testing.T) {
	c := storetest.NewCounting(storetest.Open(t, "mem://", nil))
	src := sessionlog.Location{Namespace: "ns", Session: "long", UID: "u-src"}
	app := openLog(t, c, src).NewAppender("w")
	for i := range 50 {
		if _, err := app.Append(ctx(t), ev("turn/start", i+1, ""), ev("turn/end", i+1, `,"reason":"stop"`)); err != nil {
			t.Fatal(err)
		}
	}
	dst := sessionlog.Location{Namespace: "ns", Session: "child", UID: "u-child"}
	if _, err := sessionlog.New(c).Fork(ctx(t), src, dst, 99, nil); err != nil {
		t.Fatal(err)
	}
	child := openLog(t, c, dst)
	if _, err := child.NewAppender("h").Append(ctx(t), ev("turn/start", 51, ""), ev("turn/end", 51, `,"reason":"stop"`)); err != nil {
		t.Fatal(err)
	}
	c.Reset()
	h, err := child.Head(ctx(t))
	if err != nil || h.Next != 102 || h.LastTurnEnd == nil || h.LastTurnEnd.Seq != 101 {
		t.Fatalf("Head = %+v, %v; want the child's own turn 51 at seq 100..101", h, err)
	}
	if got := c.Counts(); got.ListPages != 1 || got.RangeReads+got.Gets != 1 {
		t.Errorf("Head made %+v; want one listing (the child's own) and one read", got)
	}
}
