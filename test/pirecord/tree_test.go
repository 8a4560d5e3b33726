package pirecord

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/test/internal/pihost"
)

// TestTreeBranchesAreSessions: pi moves in its session tree as /tree does —
// back two turns, back to the old leaf, back again with a summary of the
// branch it leaves, into the middle of a turn — and a prompt follows each
// move. With turnlog running (the controllers, as on make dev), each new
// branch is a SessionFork's child of the Session that held the branch it
// leaves (spec.forkedFrom, the pi-session label); coming back to a branch
// goes on recording into the Session that holds it. Afterwards every
// Session's stored transcript is pi's own resume of the leaf it holds, and
// no Session holds entries of two branches.
func TestTreeBranchesAreSessions(t *testing.T) {
	ctx := context.Background()
	tl, prov, e := recordWithTurnlog(t, "chat-tree")
	file, sessions := walkTheTree(t, e, prov, func() []agenthost.Location {
		var list turnlogv1.SessionList
		if err := tl.Client.List(ctx, &list, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		var locs []agenthost.Location
		for _, s := range list.Items {
			locs = append(locs, agenthost.Location{Namespace: s.Namespace, Session: s.Name, UID: string(s.UID)})
		}
		return locs
	})

	var list turnlogv1.SessionList
	if err := tl.Client.List(ctx, &list, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	children := 0
	for _, s := range list.Items {
		if s.Labels["turnlog.dev/pi-session"] == "" {
			t.Errorf("Session %s has no turnlog.dev/pi-session label: %v", s.Name, s.Labels)
		}
		if s.Name == "chat-tree" {
			continue
		}
		children++
		if f := s.Spec.ForkedFrom; f == nil || !slices.ContainsFunc(list.Items, func(p turnlogv1.Session) bool { return p.Name == f.Session }) {
			t.Errorf("branch Session %s is not forked from a Session of the tree: %+v", s.Name, s.Spec.ForkedFrom)
		}
		if s.Labels["turnlog.dev/pi-branch-point"] == "" {
			t.Errorf("branch Session %s does not say where it leaves the tree: %v", s.Name, s.Labels)
		}
	}
	if children != 3 {
		t.Errorf("%d branch Sessions, want 3 (two turns back, back with a summary, into a turn)", children)
	}
	checkBranches(t, e, tl.StoreURL, file, sessions)
}

// TestTreeBranchesWithoutAnAPIServer: without a kubeconfig the package cuts
// a branch's log itself, as a SessionFork would, into a Session of its own
// in the file:// store; the same moves give the same transcripts.
func TestTreeBranchesWithoutAnAPIServer(t *testing.T) {
	prov := newProvider(t)
	dir := t.TempDir()
	e := newEnv(t, prov, "file://"+dir, nil, "default", "chat-tree", "7c1d-tree")
	file, sessions := walkTheTree(t, e, prov, func() []agenthost.Location {
		// The store's layout: <namespace>/<session>/<uid>/log/...
		logs, _ := filepath.Glob(filepath.Join(dir, "default", "*", "*", "log"))
		var locs []agenthost.Location
		for _, l := range logs {
			uidDir := filepath.Dir(l)
			locs = append(locs, agenthost.Location{Namespace: "default", Session: filepath.Base(filepath.Dir(uidDir)), UID: filepath.Base(uidDir)})
		}
		return locs
	})
	if len(sessions) != 4 {
		t.Errorf("%d Sessions in the store, want the first and 3 branches: %v", len(sessions), sessions)
	}
	checkBranches(t, e, "file://"+dir, file, sessions)
}

// walkTheTree records a pi session that moves in its tree, and returns its
// file and the Sessions it was recorded into.
func walkTheTree(t *testing.T, e *env, prov *provider, sessions func() []agenthost.Location) (string, []agenthost.Location) {
	t.Helper()
	e.Exts = append(e.Exts, pihost.TreeExtension())
	pi := e.Start()
	say := func(prompt, answer string) {
		prov.Queue(reply{Blocks: []block{{Kind: "text", Text: answer}}, Stop: "end_turn"})
		pi.Prompt(prompt)
	}
	say("One?", "1")
	prov.Queue(
		reply{Blocks: []block{{Kind: "tool_use", ID: "toolu_t1", Name: "read", Text: `{"path":"notes.txt"}`}}, Stop: "tool_use"},
		reply{Blocks: []block{{Kind: "text", Text: "2"}}, Stop: "end_turn"},
	)
	pi.Prompt("Two?")
	say("Three?", "3")
	one, three := pi.EntryWithText("1"), pi.EntryWithText("3")
	result := pi.EntryWithText("the launch is on tuesday\n")

	treeTo := func(id string, summarize bool) {
		cmd := "/tree-to " + id
		if summarize {
			cmd += " summarize"
		}
		pi.Call(map[string]any{"type": "prompt", "message": cmd})
	}
	treeTo(one, false) // back two turns: a branch of its own
	say("Two, again?", "2b")
	treeTo(three, false) // back to the first branch: its Session goes on
	say("Four?", "4")
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "The user asked for 2 through 4."}}, Stop: "end_turn"})
	treeTo(one, true) // back again, with a summary of what it leaves
	say("Five?", "5")
	treeTo(result, false) // into the middle of turn 2
	say("Go on.", "done")
	state := pi.Call(map[string]any{"type": "get_state"})
	file, _ := state["sessionFile"].(string)
	pi.Quit()
	return file, sessions()
}

// checkBranches checks every Session the tree was recorded into: the pi
// entries its log records lie on one path of pi's tree, and its stored
// transcript is pi's resume of the path's last entry.
func checkBranches(t *testing.T, e *env, storeURL, file string, sessions []agenthost.Location) {
	t.Helper()
	if len(sessions) < 2 {
		t.Fatalf("the tree was recorded into %d Sessions", len(sessions))
	}
	for _, loc := range sessions {
		ref := sessionRef{fileURL: storeURL, loc: loc}
		checkOnePath(t, e, ref, validate(t, ref.export(t)), file)
	}
}

// checkOnePath checks one Session recorded from pi session file: the pi
// entries its log (events) records lie on one path of pi's tree, and its
// stored transcript is pi's resume of that path's last entry.
func checkOnePath(t *testing.T, e *env, ref sessionRef, events []turnlog.Event, file string) {
	t.Helper()
	parents := treeOf(t, file)
	var recorded []string
	for _, ev := range events {
		var v struct {
			PiEntry *struct{ ID string } `json:"piEntry"`
		}
		_ = json.Unmarshal(ev.Raw, &v)
		if v.PiEntry != nil {
			recorded = append(recorded, v.PiEntry.ID)
		}
	}
	if len(recorded) == 0 {
		t.Errorf("%s records no pi entry", ref.loc.Session)
		return
	}
	leaf := recorded[len(recorded)-1]
	path := map[string]bool{}
	for id := leaf; id != ""; id = parents[id] {
		path[id] = true
	}
	for _, id := range recorded {
		if !path[id] {
			t.Errorf("%s holds two branches: entry %s is not on the path to its last entry %s", ref.loc.Session, id, leaf)
			break
		}
	}
	pc := resumeOf(t, e, file, leaf)
	tr := ref.stored(t, target(pc))
	if d := sameAsPi(t, tr.Messages, pc, target(pc)); d != "" {
		t.Errorf("%s's transcript is not pi's resume of %s: %s", ref.loc.Session, leaf, d)
	}
}

// treeOf reads a pi session file: each entry's parent.
func treeOf(t *testing.T, file string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	parents := map[string]string{}
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var en struct {
			ID       string  `json:"id"`
			ParentID *string `json:"parentId"`
		}
		if err := json.Unmarshal(line, &en); err != nil {
			t.Fatal(err)
		}
		if en.ParentID != nil {
			parents[en.ID] = *en.ParentID
		}
	}
	return parents
}
