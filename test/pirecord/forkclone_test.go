package pirecord

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/test/internal/pihost"
)

// TestForkAndCloneAreSessionForks: pi's own session commands, as a pi user
// types them, with turnlog running (the controllers, as on make dev):
// record, /tree back, /fork at a user message of that branch, prompt,
// /clone, prompt, /resume the first session, prompt, /fork at a user
// message of another branch, prompt, /new, prompt. Every pi session and
// branch is exactly one Session; a forked or cloned pi session's Session is
// a SessionFork's child of the Session holding the path pi copied, cut at
// the last turn both hold; each Session's stored transcript is pi's own
// resume of its branch, and no prompt is in a Session whose branch does
// not hold it.
func TestForkAndCloneAreSessionForks(t *testing.T) {
	ctx := context.Background()
	tl, prov, e := recordWithTurnlog(t, "chat-fc")
	e.Exts = append(e.Exts, pihost.TreeExtension())
	w := pihost.WalkSessions(t, e, prov)

	var list turnlogv1.SessionList
	if err := tl.Client.List(ctx, &list, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	byName := map[string]turnlogv1.Session{}
	var sessions []locatedSession
	for _, s := range list.Items {
		byName[s.Name] = s
		sessions = append(sessions, locatedSession{
			loc:       agenthost.Location{Namespace: s.Namespace, Session: s.Name, UID: string(s.UID)},
			piSession: s.Labels["turnlog.dev/pi-session"],
		})
	}
	got := checkPiSessions(t, e, tl.StoreURL, w, sessions)

	// The lineage: each Session a fork or clone made is a SessionFork's
	// child of the Session that held the copied path, cut after the last
	// prompt both hold.
	for child, parent := range checkLineage(t, w, got) {
		c := byName[child]
		if f := c.Spec.ForkedFrom; f == nil || f.Session != parent.name || f.CutSeq != parent.cut {
			t.Errorf("Session %s is forked from %+v, want %s at seq %d", child, f, parent.name, parent.cut)
		}
		if c.Labels["turnlog.dev/pi-branch-point"] == "" {
			t.Errorf("Session %s does not say where it leaves its parent: %v", child, c.Labels)
		}
	}
	if f := byName["pi-"+w.Fresh].Spec.ForkedFrom; f != nil {
		t.Errorf("the Session of /new's pi session is forked from %+v", f)
	}
}

// TestForkAndCloneWithoutAnAPIServer: without a kubeconfig the package cuts
// the logs itself, into Sessions of their own in the file:// store; the
// same commands give the same Sessions and transcripts.
func TestForkAndCloneWithoutAnAPIServer(t *testing.T) {
	prov := newProvider(t)
	dir := t.TempDir()
	e := newEnv(t, prov, "file://"+dir, nil, "default", "chat-fc", "7c1d-fc")
	e.Exts = append(e.Exts, pihost.TreeExtension())
	w := pihost.WalkSessions(t, e, prov)
	// The store's layout: <namespace>/<session>/<uid>/log/...
	logs, _ := filepath.Glob(filepath.Join(dir, "default", "*", "*", "log"))
	var sessions []locatedSession
	for _, l := range logs {
		uidDir := filepath.Dir(l)
		name := filepath.Base(filepath.Dir(uidDir))
		sessions = append(sessions, locatedSession{loc: agenthost.Location{Namespace: "default", Session: name, UID: filepath.Base(uidDir)},
			piSession: w.PiSession(branchOf(w, name))})
	}
	checkLineage(t, w, checkPiSessions(t, e, "file://"+dir, w, sessions))
}

type cutOf struct {
	name string
	cut  int64
}

// checkLineage checks that the log of each Session a fork, a clone or /tree
// made starts with its parent's log through the turn/end of the last
// prompt both hold, byte for byte, and returns those parents and cuts by
// child.
func checkLineage(t *testing.T, w *pihost.Walk, got map[string]recordedSession) map[string]cutOf {
	t.Helper()
	named := map[string]string{}
	for name := range got {
		named[branchOf(w, name)] = name
	}
	parents := map[string]cutOf{}
	forkedAfter := func(child, parent, lastShared string) {
		t.Helper()
		c, p := named[child], named[parent]
		if c == "" || p == "" {
			t.Errorf("no Session for %s or its parent %s: %v", child, parent, named)
			return
		}
		cut := turnEndAfter(t, got[p].events, lastShared)
		parents[c] = cutOf{p, cut}
		parentLog, childLog := got[p].log, got[c].log
		if n := lineEnd(parentLog, cut); n < 0 || !bytes.HasPrefix(childLog, parentLog[:n]) {
			t.Errorf("the log of %s does not start with that of %s through seq %d (the turn/end of %q): %s", c, p, cut, lastShared, firstDifference(parentLog, childLog))
		}
	}
	forkedAfter(pihost.WalkBranch, pihost.WalkRoot, "One?")
	forkedAfter(pihost.WalkForked, pihost.WalkBranch, "Two, again?")
	forkedAfter(pihost.WalkCloned, pihost.WalkForked, "Five?")
	forkedAfter(pihost.WalkForkedOff, pihost.WalkRoot, "Two?")
	return parents
}

// branchOf is the branch of the walk a Session of the name records, as
// the package names them: the first Session, its /tree branch's
// (<first>-<entry>-<hex>), and pi-<id> for the other pi sessions; "" for
// none.
func branchOf(w *pihost.Walk, name string) string {
	switch {
	case name == "chat-fc":
		return pihost.WalkRoot
	case strings.HasPrefix(name, "chat-fc-"):
		return pihost.WalkBranch
	}
	for _, b := range []string{pihost.WalkForked, pihost.WalkCloned, pihost.WalkForkedOff, pihost.WalkFresh} {
		if name == "pi-"+w.PiSession(b) {
			return b
		}
	}
	return ""
}

// locatedSession is a Session and the pi session it records.
type locatedSession struct {
	loc       agenthost.Location
	piSession string
}

type recordedSession struct {
	log     []byte
	events  []turnlog.Event
	prompts []string
}

// checkPiSessions checks every Session the walk recorded into: there is
// one per pi session and branch, each holds the prompts of its branch and
// no other, the pi entries its log records lie on one path of its pi
// session's tree, and its stored transcript is pi's resume of that path's
// last entry. It returns what each Session's log holds.
func checkPiSessions(t *testing.T, e *env, storeURL string, w *pihost.Walk, sessions []locatedSession) map[string]recordedSession {
	t.Helper()
	got := map[string]recordedSession{}
	want := w.Prompts()
	branches := map[string]bool{}
	for _, s := range sessions {
		ref := sessionRef{fileURL: storeURL, loc: s.loc}
		log := ref.export(t)
		events := validate(t, log)
		rs := recordedSession{log: log, events: events, prompts: userPrompts(t, events)}
		got[s.loc.Session] = rs
		b := branchOf(w, s.loc.Session)
		if b == "" || branches[b] {
			t.Errorf("Session %s records prompts %q: no pi session or branch of its own is recorded there", s.loc.Session, rs.prompts)
			continue
		}
		branches[b] = true
		if !slices.Equal(rs.prompts, want[b]) {
			t.Errorf("Session %s records the prompts %q, want %q", s.loc.Session, rs.prompts, want[b])
		}
		if s.piSession != w.PiSession(b) {
			t.Errorf("Session %s says it records pi session %q, want %q", s.loc.Session, s.piSession, w.PiSession(b))
		}
		checkOnePath(t, e, ref, events, w.Files[w.PiSession(b)])
	}
	if len(got) != len(want) || len(branches) != len(want) {
		t.Errorf("%d Sessions, want one per pi session and branch (%d): %v", len(got), len(want), slices.Sorted(maps.Keys(got)))
	}
	return got
}

// userPrompts are the texts of a log's user messages, in order.
func userPrompts(t *testing.T, events []turnlog.Event) []string {
	t.Helper()
	var out []string
	for _, ev := range events {
		if ev.Type != turnlog.TypeUserMessage {
			continue
		}
		var m struct {
			Content []struct{ Text string } `json:"content"`
		}
		if err := json.Unmarshal(ev.Raw, &m); err != nil || len(m.Content) == 0 {
			t.Fatalf("seq %d: a user message without text: %s", ev.Seq, ev.Raw)
		}
		out = append(out, m.Content[0].Text)
	}
	return out
}

// turnEndAfter is the seq of the turn/end of the turn prompt opens.
func turnEndAfter(t *testing.T, events []turnlog.Event, prompt string) int64 {
	t.Helper()
	seen := false
	for _, ev := range events {
		if ev.Type == turnlog.TypeUserMessage && slices.Equal(userPrompts(t, []turnlog.Event{ev}), []string{prompt}) {
			seen = true
		}
		if seen && ev.Type == turnlog.TypeTurnEnd {
			return ev.Seq
		}
	}
	t.Fatalf("no turn/end after %q", prompt)
	return -1
}

// lineEnd is the length of log's first seq+1 lines, -1 if it is shorter.
func lineEnd(log []byte, seq int64) int {
	n := 0
	for range seq + 1 {
		i := bytes.IndexByte(log[n:], '\n')
		if i < 0 {
			return -1
		}
		n += i + 1
	}
	return n
}

// firstDifference describes the first line where two logs differ.
func firstDifference(a, b []byte) string {
	al, bl := bytes.SplitAfter(a, []byte("\n")), bytes.SplitAfter(b, []byte("\n"))
	for i := range min(len(al), len(bl)) {
		if !bytes.Equal(al[i], bl[i]) {
			return fmt.Sprintf("line %d:\n  parent %.300s\n  child  %.300s", i, al[i], bl[i])
		}
	}
	return fmt.Sprintf("one has %d lines, the other %d", len(al), len(bl))
}

// TestOpenOnlyContinuesTheSession: pi started only to /turnlog-open a
// Session records nothing of its own (no empty pi-<id> Session), and every
// turn it records into the opened Session nudges it
// (turnlog.dev/requested-at, newer after each turn), so the workers replay
// it at once rather than at the manager's next poll.
func TestOpenOnlyContinuesTheSession(t *testing.T) {
	ctx := context.Background()
	tl, prov, e := recordWithTurnlog(t, "chat-open")
	first := e.Start()
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "The launch is on Tuesday."}}, Stop: "end_turn"})
	first.Prompt("When is the launch?")
	first.Quit()
	waitReplayed(t, tl, "chat-open")

	// Another pi, whose own session would be pi-<id>, only continues it.
	e.Vars = append(e.Vars, "TURNLOG_SESSION=")
	pi := e.Start()
	pi.Call(map[string]any{"type": "prompt", "message": "/turnlog-open default/chat-open"})
	nudged := func() time.Time {
		var s turnlogv1.Session
		if err := tl.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "chat-open"}, &s); err != nil {
			t.Fatal(err)
		}
		at, _ := time.Parse(time.RFC3339Nano, s.Annotations[turnlogv1.AnnotationRequestedAt])
		return at
	}
	for i, q := range []string{"And the weather?", "What should I bring?"} {
		before := nudged()
		prov.Queue(reply{Blocks: []block{{Kind: "text", Text: fmt.Sprintf("Answer %d.", i)}}, Stop: "end_turn"})
		pi.Prompt(q)
		deadline := time.Now().Add(30 * time.Second)
		for !nudged().After(before) {
			if time.Now().After(deadline) {
				t.Fatalf("turn %d recorded into the opened Session did not nudge it (requested-at still %s)", i+1, before.Format(time.RFC3339Nano))
			}
			time.Sleep(100 * time.Millisecond)
		}
		s := waitReplayed(t, tl, "chat-open")
		if got := userPrompts(t, validate(t, sessionRef{fileURL: tl.StoreURL, loc: agenthost.Location{Namespace: "default", Session: "chat-open", UID: string(s.UID)}}.export(t))); !slices.Contains(got, q) {
			t.Fatalf("the opened Session's log holds the prompts %q, not %q", got, q)
		}
	}
	pi.Quit()

	var list turnlogv1.SessionList
	if err := tl.Client.List(ctx, &list, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"chat-open"}) {
		t.Errorf("Sessions %v; want chat-open alone: the pi session /turnlog-open left had nothing to record", names)
	}
}
