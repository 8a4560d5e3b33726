package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
)

// TestForkTreesShareTranscriptsProperty drives random fork trees as the
// manager and the workers do, derived data included: turns appended and
// replayed (some long enough to seal a transcript part, so that children
// share it), compactions that rewrite a transcript, forks at random turns
// (forks of forks included) that start from the source's derived data and
// share its final parts, and deletions in every order with both
// retentions, the manager dying mid-fork and mid-delete and started again.
// After every step each Session's stored transcript, and each retained
// one, is a whole replay of its log; once everything is deleted, nothing is
// left under the prefix. internal/sessionlog's TestForkTreesProperty does
// the same for the logs alone, at more steps.
func TestForkTreesShareTranscriptsProperty(t *testing.T) {
	for _, be := range []struct {
		name  string
		open  func(t *testing.T) store.Bucket
		steps int
	}{
		{"file", func(t *testing.T) store.Bucket { return storetest.Open(t, "file://"+t.TempDir(), nil) }, 50},
		{"versitygw", func(t *testing.T) store.Bucket {
			srv := versitygw.Start(t)
			return storetest.Open(t, srv.URL, srv.Options())
		}, 40},
	} {
		t.Run(be.name, func(t *testing.T) {
			b := be.open(t)
			shared := 0
			for seed := uint64(1); seed <= 3; seed++ {
				shared += runTranscriptTree(t, b, seed, be.steps)
			}
			// A tree whose children copied everything shows nothing.
			if shared == 0 {
				t.Errorf("no fork shared a transcript part")
			}
		})
	}
}

// treeSession is what the property test expects of one Session.
type treeSession struct {
	loc   sessionlog.Location
	lines [][]byte // the log, line by line, each with its newline
	// alive: the Session exists; retained: deleted with retention Retain,
	// its log and derived data kept.
	alive, retained bool
}

func (s *treeSession) data() []byte { return bytes.Join(s.lines, nil) }

// turnEnds are the seqs of the session's turn/ends.
func (s *treeSession) turnEnds() []int64 {
	var ends []int64
	for i, l := range s.lines {
		if bytes.Contains(l, []byte(`"type":"turn/end"`)) {
			ends = append(ends, int64(i))
		}
	}
	return ends
}

// runTranscriptTree runs one random tree and returns how many transcript
// parts its forks shared.
func runTranscriptTree(t *testing.T, b store.Bucket, seed uint64, steps int) (shared int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x7a11))
	prefix := fmt.Sprintf("tree-%d", seed)
	logs := sessionlog.New(b)
	var sessions []*treeSession
	byUID := map[string]*treeSession{}
	live := func(_ context.Context, loc sessionlog.Location) (bool, error) {
		s := byUID[loc.UID]
		return s != nil && s.alive, nil
	}
	logOf := func(st *sessionlog.Store, s *treeSession) derived.StoreLog {
		lg, err := st.Log(s.loc)
		if err != nil {
			t.Fatal(err)
		}
		return derived.StoreLog{Log: lg}
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
	// appendEvents appends events (without seqs) to s and keeps them, with
	// their seqs, as s's expected log.
	appendEvents := func(s *treeSession, events [][]byte) {
		first, err := logOf(logs, s).Log.NewAppender("host").Append(ctx, events...)
		if err != nil {
			t.Fatalf("seed %d: append to %s: %v", seed, s.loc.Session, err)
		}
		for i, e := range events {
			s.lines = append(s.lines, fmt.Appendf(nil, "{\"seq\":%d,%s\n", first+int64(i), e[1:]))
		}
	}
	// turns appends one to three turns, one in three long enough to seal
	// the part it lands in, each replayed before the next as a host's.
	turns := func(s *treeSession) {
		for range 1 + rng.IntN(3) {
			text := fmt.Sprintf("turn %d of %s", len(s.lines), s.loc.Session)
			if rng.IntN(3) == 0 {
				text = strings.Repeat(text+" ", derived.MaxPartBytes/2/len(text)+64)
			}
			appendEvents(s, turnEvents(len(s.lines) == 0, int64(len(s.turnEnds())+1), text))
			runBoth(t, logOf(logs, s), fixtureTarget, s.loc.Session)
		}
	}
	// dying runs op against a manager that dies after a few requests, then
	// again against one that does not: what a restarted manager does.
	dying := func(op func(st *sessionlog.Store) error) error {
		if err := op(sessionlog.New(storetest.NewDying(b, int64(rng.IntN(20))))); err == nil {
			return nil
		}
		return op(logs)
	}
	check := func(step int, what string) {
		t.Helper()
		for _, s := range sessions {
			if (s.alive || s.retained) && len(s.turnEnds()) > 0 {
				checkAgainstWhole(t, logOf(logs, s), s.data(), fixtureTarget, fmt.Sprintf("seed %d step %d (%s): %s", seed, step, what, s.loc.Session))
			}
		}
	}

	for step := range steps {
		var what string
		switch r := rng.IntN(20); {
		case r < 2 || len(sessions) == 0:
			s := newSession()
			turns(s)
			what = "new " + s.loc.Session
		case r < 9:
			s := pick(func(s *treeSession) bool { return s.alive })
			if s == nil {
				continue
			}
			turns(s)
			what = "turns of " + s.loc.Session
		case r < 10:
			s := pick(func(s *treeSession) bool { return s.alive })
			if s == nil {
				continue
			}
			next := int64(len(s.lines))
			appendEvents(s, [][]byte{fmt.Appendf(nil, `{"time":"2026-12-03T10:00:00Z","type":"context/compaction","content":[{"type":"text","text":"summary"}],"firstKeptSeq":%d,"tokensBefore":1000}`, next)})
			turns(s)
			what = "compaction of " + s.loc.Session
		case r < 15:
			src := pick(func(s *treeSession) bool { return s.alive })
			if src == nil {
				continue
			}
			// At the source's last turn half the time, where its head
			// checkpoint serves; anywhere else, one it kept or none.
			ends := src.turnEnds()
			cut := ends[len(ends)-1]
			if rng.IntN(2) == 0 {
				cut = ends[rng.IntN(len(ends))]
			}
			child := newSession()
			child.lines = slices.Clone(src.lines[:cut+1])
			what = fmt.Sprintf("fork %s at %d into %s", src.loc.Session, cut, child.loc.Session)
			// As the manager does: the child's derived data first, from
			// the source's, sharing the parts the pins keep; then the log.
			if err := dying(func(st *sessionlog.Store) error {
				refs, err := st.ForkReferences(ctx, src.loc, cut)
				if err != nil {
					return err
				}
				if _, err := derived.SeedFork(ctx, logOf(st, src), logOf(st, child), cut, fixtureTarget, true, refs.Names); err != nil {
					return err
				}
				_, err = st.Fork(ctx, src.loc, child.loc, cut, live)
				return err
			}); err != nil {
				t.Fatalf("seed %d step %d: %s: %v", seed, step, what, err)
			}
			runBoth(t, logOf(logs, child), fixtureTarget, child.loc.Session)
			var state derived.ReplayState
			if _, err := derived.LoadReplayState(ctx, logOf(logs, child), fixtureTarget, &state); err != nil {
				t.Fatal(err)
			}
			for _, p := range state.Parts {
				if p.Session != "" {
					shared++
				}
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
				_, err := st.Delete(ctx, s.loc, live)
				return err
			}); err != nil {
				t.Fatalf("seed %d step %d: %s: %v", seed, step, what, err)
			}
		}
		check(step, what)
	}
	// Everything goes, retained Sessions too (an operator's clean-up), in
	// a random order.
	rng.Shuffle(len(sessions), func(i, j int) { sessions[i], sessions[j] = sessions[j], sessions[i] })
	for _, s := range sessions {
		if s.alive || s.retained {
			s.alive, s.retained = false, false
			if _, err := logs.Delete(ctx, s.loc, live); err != nil {
				t.Fatalf("seed %d: final delete of %s: %v", seed, s.loc.Session, err)
			}
		}
	}
	for o, err := range b.List(ctx, prefix+"/") {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("seed %d: %s left after every Session of the tree was deleted", seed, o.Key)
	}
	t.Logf("seed %d: %d Sessions, %d transcript parts shared by forks", seed, len(sessions), shared)
	return shared
}

// turnEvents is a turn's events, without seqs, after a session/start when
// first: the user's text and an assistant's answer.
func turnEvents(first bool, turn int64, text string) [][]byte {
	var events [][]byte
	if first {
		events = append(events, []byte(`{"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}}`))
	}
	q, _ := json.Marshal(text)
	return append(events,
		fmt.Appendf(nil, `{"type":"turn/start","turn":%d}`, turn),
		fmt.Appendf(nil, `{"type":"user/message","turn":%d,"content":[{"type":"text","text":%s}]}`, turn, q),
		fmt.Appendf(nil, `{"type":"assistant/message","turn":%d,"response":0,"message":{"role":"assistant","content":[{"type":"text","text":"answer %d"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"timestamp":%d}}`, turn, turn, 1764583200000+turn),
		fmt.Appendf(nil, `{"type":"turn/end","turn":%d,"reason":"stop"}`, turn))
}
