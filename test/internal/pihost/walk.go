package pihost

import (
	"encoding/json"
	"testing"
)

// Walk is what WalkSessions did: the pi sessions it went through, by what
// made them, and their files.
type Walk struct {
	// First is the pi session pi started with; Forked the one pi's fork at
	// a user message of /tree's branch made; Cloned the clone of Forked;
	// ForkedOff the one pi's fork at a user message of another branch of
	// First made; Fresh the one /new made.
	First, Forked, Cloned, ForkedOff, Fresh string
	// Files are the pi sessions' files, by pi session id.
	Files map[string]string
	// Leaves are the last entry of each branch recorded, by what holds it
	// (see Prompts).
	Leaves map[string]string
}

// The branches of a walk, by what holds them.
const (
	WalkRoot      = "root"      // First's first branch
	WalkBranch    = "branch"    // First's branch /tree made
	WalkForked    = "forked"    // Forked's
	WalkCloned    = "cloned"    // Cloned's
	WalkForkedOff = "forkedOff" // ForkedOff's
	WalkFresh     = "fresh"     // Fresh's
)

// Prompts are the prompts each branch of the walk holds, in order.
func (w *Walk) Prompts() map[string][]string {
	return map[string][]string{
		WalkRoot:      {"One?", "Two?", "Three?"},
		WalkBranch:    {"One?", "Two, again?", "Four?", "Seven?"},
		WalkForked:    {"One?", "Two, again?", "Five?"},
		WalkCloned:    {"One?", "Two, again?", "Five?", "Six?"},
		WalkForkedOff: {"One?", "Two?", "Three, again?"},
		WalkFresh:     {"Eight?"},
	}
}

// PiSession is the pi session whose file holds a branch of the walk.
func (w *Walk) PiSession(branch string) string {
	switch branch {
	case WalkForked:
		return w.Forked
	case WalkCloned:
		return w.Cloned
	case WalkForkedOff:
		return w.ForkedOff
	case WalkFresh:
		return w.Fresh
	}
	return w.First
}

// WalkSessions drives pi through the commands a pi user types to move
// between sessions and branches, a prompt after each: three prompts, /tree
// back to the first answer, two prompts; /fork at the last of them, a
// prompt; /clone, a prompt; /resume of the first session (its /tree
// branch), a prompt; /fork at a user message of the first branch, a
// prompt; /new, a prompt. e needs TreeExtension among its extensions.
func WalkSessions(tb testing.TB, e *Env, prov *Provider) *Walk {
	tb.Helper()
	pi := e.Start()
	w := &Walk{Files: map[string]string{}, Leaves: map[string]string{}}
	current := func() string {
		tb.Helper()
		state := pi.Call(map[string]any{"type": "get_state"})
		id, _ := state["sessionId"].(string)
		file, _ := state["sessionFile"].(string)
		if id == "" || file == "" {
			tb.Fatalf("pi's state names no session: %v", state)
		}
		w.Files[id] = file
		return id
	}
	say := func(branch, prompt, answer string) {
		tb.Helper()
		prov.Queue(Reply{Blocks: []Block{{Kind: "text", Text: answer}}, Stop: "end_turn"})
		pi.Prompt(prompt)
		w.Leaves[branch] = pi.EntryWithText(answer)
	}
	fork := func(prompt string) {
		tb.Helper()
		res := pi.Call(map[string]any{"type": "fork", "entryId": pi.EntryWithText(prompt)})
		if res["cancelled"] == true {
			tb.Fatalf("pi's fork at %q was cancelled", prompt)
		}
	}

	say(WalkRoot, "One?", "1")
	say(WalkRoot, "Two?", "2")
	say(WalkRoot, "Three?", "3")
	w.First = current()
	pi.Call(map[string]any{"type": "prompt", "message": "/tree-to " + pi.EntryWithText("1")})
	say(WalkBranch, "Two, again?", "2b")
	say(WalkBranch, "Four?", "4")

	fork("Four?") // a new pi session holding One and Two again
	w.Forked = current()
	say(WalkForked, "Five?", "5")

	pi.Call(map[string]any{"type": "clone"}) // a new pi session holding the forked one's branch
	w.Cloned = current()
	say(WalkCloned, "Six?", "6")

	pi.Call(map[string]any{"type": "switch_session", "sessionPath": w.Files[w.First]})
	if current() != w.First {
		tb.Fatalf("pi did not resume the first session")
	}
	say(WalkBranch, "Seven?", "7") // on the branch /tree made, where pi left it

	fork("Three?") // a user message of the first branch, not the current one
	w.ForkedOff = current()
	say(WalkForkedOff, "Three, again?", "3b")

	pi.Call(map[string]any{"type": "new_session"})
	w.Fresh = current()
	say(WalkFresh, "Eight?", "8")
	pi.Quit()

	if len(w.Files) != 5 {
		tb.Fatalf("pi went through %d sessions, want 5: %v", len(w.Files), w.Files)
	}
	return w
}

// EntryWithText is the id of an entry of pi's session whose first content
// block's text is text.
func (p *Pi) EntryWithText(text string) string {
	p.tb.Helper()
	raw, err := json.Marshal(p.Call(map[string]any{"type": "get_entries"})["entries"])
	if err != nil {
		p.tb.Fatal(err)
	}
	var entries []struct {
		ID      string `json:"id"`
		Message struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		p.tb.Fatal(err)
	}
	for _, en := range entries {
		var blocks []struct{ Text string }
		if json.Unmarshal(en.Message.Content, &blocks) == nil && len(blocks) > 0 && blocks[0].Text == text {
			return en.ID
		}
	}
	p.tb.Fatalf("pi has no entry saying %q", text)
	return ""
}
