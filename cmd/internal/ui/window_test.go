package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/worker"
)

// storedSession is a Session whose log a test writes turn by turn, with
// the workers' replay run when the test says, served by a Server whose
// store counts what it reads.
type storedSession struct {
	t       testing.TB
	srv     *Server
	session *turnlogv1.Session
	log     *agenthost.Log
	workers derived.Log
	count   *storetest.Counting
	reads   *readKeys
	turns   [][]agenthost.Event // the events not written yet, a turn at a time
	next    int64
}

func newStoredSession(t testing.TB, events []agenthost.Event) *storedSession {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := turnlogv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	session := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "long", UID: types.UID("uid-long")}}
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(session).WithStatusSubresource(session).Build()
	b, err := store.Open(context.Background(), "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	reads := &readKeys{Bucket: b}
	count := storetest.NewCounting(reads)
	st := agenthost.StoreOnBucket(count, nil)
	t.Cleanup(func() { st.Close() })
	tcp, _ := net.ResolveTCPAddr("tcp", addr)
	srv, err := newServer(Options{Kube: kube, Namespace: "default", Store: st}, tcp)
	if err != nil {
		t.Fatal(err)
	}
	log, err := st.OpenSession(context.Background(), kube, "default", "long")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sessionlog.New(count).Log(sessionlog.Location{Namespace: "default", Session: "long", UID: "uid-long"})
	if err != nil {
		t.Fatal(err)
	}
	s := &storedSession{t: t, srv: srv, session: session, log: log, workers: derived.StoreLog{Log: raw}, count: count, reads: reads}
	var turn []agenthost.Event
	for _, e := range events {
		turn = append(turn, e)
		if e.Type() == string(turnlog.TypeTurnEnd) {
			s.turns = append(s.turns, turn)
			turn = nil
		}
	}
	if turn != nil {
		s.turns = append(s.turns, turn)
	}
	return s
}

// readKeys records the keys of the objects read.
type readKeys struct {
	store.Bucket
	mu   sync.Mutex
	keys []string
}

func (r *readKeys) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	r.mu.Lock()
	r.keys = append(r.keys, key)
	r.mu.Unlock()
	return r.Bucket.NewRangeReader(ctx, key, offset, length)
}

// segments returns how many segments and transcript parts were read
// since it was last called.
func (r *readKeys) segments() (segments, parts int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range r.keys {
		switch {
		case strings.Contains(k, "/log/"):
			segments++
		case strings.Contains(k, "/derived/transcript/") && !strings.HasSuffix(k, "/checkpoint.json"):
			parts++
		}
	}
	r.keys = nil
	return segments, parts
}

// write appends the next n turns (all that are left for n < 0).
func (s *storedSession) write(n int) {
	s.t.Helper()
	if n < 0 || n > len(s.turns) {
		n = len(s.turns)
	}
	var batch []agenthost.Event
	for _, turn := range s.turns[:n] {
		batch = append(batch, turn...)
	}
	s.turns = s.turns[n:]
	if len(batch) == 0 {
		return
	}
	if err := s.log.AppendAt(context.Background(), s.next, batch); err != nil {
		s.t.Fatal(err)
	}
	s.next += int64(len(batch))
}

// replay runs the workers' replay over what is written.
func (s *storedSession) replay() {
	s.t.Helper()
	if _, err := worker.Replay(context.Background(), s.workers, turnlog.Adapter{}); err != nil {
		s.t.Fatal(err)
	}
}

// get answers a request of the page's API, decoded into v; it returns the
// answer's size.
func (s *storedSession) get(path string, v any) int {
	s.t.Helper()
	w := serve(s.srv, http.MethodGet, path, addr, "", nil)
	if w.Code != http.StatusOK {
		s.t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
		s.t.Fatal(err)
	}
	return w.Body.Len()
}

func (s *storedSession) window(query url.Values) conversation {
	s.t.Helper()
	var c conversation
	s.get("/api/sessions/default/long/turns?"+query.Encode(), &c)
	return c
}

// whole is the conversation read as it was before windows: the whole raw
// log and the whole stored transcript.
func (s *storedSession) whole() []turnView {
	s.t.Helper()
	ctx := context.Background()
	rr := newRawReader(0)
	for e, err := range s.log.Events(ctx, 0) {
		if err != nil {
			s.t.Fatal(err)
		}
		rr.add(&e)
	}
	tr, err := s.log.Transcript(ctx)
	if err != nil && !isNotReplayed(err) {
		s.t.Fatal(err)
	}
	return buildConversation(tr.Messages, rr.done(), degradedMessages(s.session, tr.Diagnostics, nil), refusals(tr.Diagnostics))
}

func isNotReplayed(err error) bool {
	_, ok := err.(*derived.NotReplayedError)
	return ok
}

// page is the conversation as the page holds it: the windows it was sent,
// earliest first, with the marks it was sent applied.
type page struct {
	turns []turnView
	marks map[int64]mark
}

func (p *page) take(c conversation) {
	for _, m := range c.Marks {
		p.marks[m.Seq] = m
	}
}

// shown is what the page shows: its turns with the marks applied to the
// messages that have none of their own.
func (p *page) shown() []turnView {
	out := make([]turnView, len(p.turns))
	for i, t := range p.turns {
		t.Entries = append([]entry(nil), t.Entries...)
		for j := range t.Entries {
			e := &t.Entries[j]
			m, ok := p.marks[e.Seq]
			if !ok || e.Kind != "message" {
				continue
			}
			if e.Degraded == nil {
				e.Degraded = m.Degraded
			}
			if e.Refused == nil && refusable(replay.Message{Role: e.Role, Synthetic: e.Synthetic}) {
				e.Refused = m.Refused
			}
		}
		out[i] = t
	}
	return out
}

// scrollAll loads the last turns, then earlier windows until the log's
// start, as the page does when scrolled to the top again and again; each
// window must end where the one after it starts.
func (s *storedSession) scrollAll(limit int) (*page, conversation) {
	s.t.Helper()
	p := &page{marks: map[int64]mark{}}
	last := s.window(url.Values{"limit": {fmt.Sprint(limit)}})
	p.turns = last.Turns
	p.take(last)
	for c := last; c.Earlier != ""; {
		after := c.From
		c = s.window(url.Values{"limit": {fmt.Sprint(limit)}, "before": {c.Earlier}})
		if c.To+1 != after || c.From >= after {
			s.t.Fatalf("the window before seq %d covers seqs %d to %d", after, c.From, c.To)
		}
		p.turns = append(append([]turnView(nil), c.Turns...), p.turns...)
		p.take(c)
	}
	return p, last
}

// update applies a live update from the cursor of the newest window, as
// the page does: the turns from its seq on are replaced, or, when the
// stored transcript was rewritten (another epoch) or the update is too
// large (Reset), the page starts over.
func (s *storedSession) update(p *page, newest conversation, limit int) (*page, conversation) {
	s.t.Helper()
	c := s.window(url.Values{"from": {newest.Refresh}})
	if c.Reset || c.Epoch != newest.Epoch {
		p, c = s.scrollAll(limit)
		return p, c
	}
	kept := p.turns[:0]
	for _, t := range p.turns {
		if t.Start < c.From {
			kept = append(kept, t)
		}
	}
	p.turns = append(kept, c.Turns...)
	p.take(c)
	return p, c
}

func readTestLog(t testing.TB, path string) []agenthost.Event {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	events, err := agenthost.ReadEvents(bytes.NewReader(data), 0)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// sameTurns reports the first turn where got and want differ.
func sameTurns(t testing.TB, what string, got, want []turnView) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		var g, w []byte
		if i < len(got) {
			g, _ = json.Marshal(got[i])
		}
		if i < len(want) {
			w, _ = json.Marshal(want[i])
		}
		if !bytes.Equal(g, w) {
			t.Errorf("%s: turn section %d of %d (want %d):\n got %.1500s\nwant %.1500s", what, i, len(got), len(want), g, w)
			return
		}
	}
}

// testLogs are logs with what a window can split: stopped responses,
// degraded and refused messages, tool calls answered in the next turn or
// never, held system messages, compactions and context edits.
func testLogs(t *testing.T) map[string][]agenthost.Event {
	logs := map[string][]agenthost.Event{
		"support-chat": readTestLog(t, "../../../config/samples/support-chat.jsonl"),
	}
	refused, err := agenthost.ReadEvents(bytes.NewReader(loggen.RefusedLog(4)), 0)
	if err != nil {
		t.Fatal(err)
	}
	logs["refused"] = refused
	generated, err := agenthost.ReadEvents(bytes.NewReader(loggen.Log(400, 7)), 0)
	if err != nil {
		t.Fatal(err)
	}
	logs["generated"] = generated
	for _, pattern := range []string{"../../../testdata/logs/*.jsonl", "../../../testdata/pi/logs/*.jsonl"} {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			if filepath.Base(f) == "invalid-structure.jsonl" {
				continue
			}
			logs[filepath.Base(f)] = readTestLog(t, f)
		}
	}
	return logs
}

// The windows of a Session, from its last turns back to its first, show
// with their marks what the whole conversation shows, however the
// workers' runs split the transcript into parts; live updates from the
// last cursor, after more turns were written (and then replayed), bring
// the page to the whole conversation again.
func TestWindowsAddUpToTheConversation(t *testing.T) {
	for name, events := range testLogs(t) {
		for _, run := range []int{1, 3, 1000} {
			for _, limit := range []int{1, 2, 5} {
				t.Run(fmt.Sprintf("%s/runs-of-%d/limit-%d", name, run, limit), func(t *testing.T) {
					s := newStoredSession(t, events)
					for keep := len(s.turns) / 3; len(s.turns) > max(keep, 1); {
						s.write(run)
						s.replay()
					}
					p, last := s.scrollAll(limit)
					sameTurns(t, "the windows", p.shown(), s.whole())

					s.write(1)
					s.replay()
					s.write(-1)
					p, c := s.update(p, last, limit)
					sameTurns(t, "after an update with the last turns not replayed", p.shown(), s.whole())
					s.replay()
					p, _ = s.update(p, c, limit)
					sameTurns(t, "after an update with every turn replayed", p.shown(), s.whole())
				})
			}
		}
	}
}
