package pirecord

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
	"github.com/turnlog/turnlog/internal/turnlog"
)

var forkedRE = regexp.MustCompile(`forked \S+ at seq (\d+) into ([^/\s]+)/([^/\s]+)/(\S+)`)

// TestForkAndResumeInPi: pi records two turns; /turnlog-fork cuts the
// Session after the first into a new Session (the child's log is the
// parent's prefix, byte for byte); once the workers have replayed the
// child, /turnlog-open continues it in a new pi session; and the child's
// first request to the provider is the parent's second request: the same
// system prompt, tools and messages through the cut.
func TestForkAndResumeInPi(t *testing.T) {
	gw := versitygw.Start(t)
	prov := newProvider(t)
	parent := sessionRef{gw: gw, loc: agenthost.Location{Namespace: "team-a", Session: "chat-fork", UID: "5e55-parent"}}
	e := newEnv(t, prov, gw.URL, gw, parent.loc.Namespace, parent.loc.Session, parent.loc.UID)
	pi := e.Start()
	prov.Queue(
		reply{Blocks: []block{
			{Kind: "thinking", Text: "Read the notes first.", Sig: "sig-fork-1"},
			{Kind: "tool_use", ID: "toolu_p1", Name: "read", Text: `{"path":"notes.txt"}`},
		}, Stop: "tool_use"},
		reply{Blocks: []block{{Kind: "text", Text: "The launch is on Tuesday."}}, Stop: "end_turn"},
		reply{Blocks: []block{{Kind: "text", Text: "Sunny, in the parent."}}, Stop: "end_turn"},
	)
	pi.Prompt("When is the launch?")
	const second = "And what will the weather be?"
	pi.Prompt(second)
	parentSecond := prov.Requests()[2]

	// The package writes behind pi: the log holds both turns a moment
	// after pi settles, not at once.
	waitTurns(t, parent, 2)
	parentLog := parent.export(t)
	events := validate(t, parentLog)
	// At the first user message, as pi names it.
	entry := ""
	for _, ev := range events {
		var m struct{ PiEntry struct{ ID string } }
		if err := json.Unmarshal(ev.Raw, &m); err != nil {
			t.Fatal(err)
		}
		if ev.Type == turnlog.TypeUserMessage && entry == "" {
			entry = m.PiEntry.ID
		}
	}
	// Bad input gets one line saying what is wrong.
	for cmd, want := range map[string]string{
		"/turnlog-fork 4x":         `turnlog-fork: atSeq "4x": want a non-negative decimal such as 41 or 40.1`,
		"/turnlog-fork 9999":       `turnlog-fork: no turn ends at or after seq 9999`,
		"/turnlog-fork @0000beef":  `turnlog-fork: no pi entry 0000beef in team-a/chat-fork's log`,
		"/turnlog-open team-a/x":   `turnlog-open: "team-a/x": want NAMESPACE/SESSION/UID`,
		"/turnlog-open team-a/x/y": `turnlog-open: not replayed yet for fake/model-a (anthropic-messages)`,
	} {
		pi.Call(map[string]any{"type": "prompt", "message": cmd})
		if len(pi.Notes) == 0 || !strings.HasPrefix(pi.Notes[len(pi.Notes)-1], want) || strings.Contains(pi.Notes[len(pi.Notes)-1], "\n") {
			t.Errorf("%s: said %q, want one line starting %q", cmd, pi.Notes, want)
		}
	}
	// The child Session exists already, with the uid the API server gave it.
	fork := fmt.Sprintf("/turnlog-fork @%s team-a/chat-fork-child/c41d-child", entry)
	pi.Call(map[string]any{"type": "prompt", "message": fork})
	if len(pi.Notes) == 0 {
		t.Fatalf("/turnlog-fork said nothing")
	}
	m := forkedRE.FindStringSubmatch(pi.Notes[len(pi.Notes)-1])
	if m == nil {
		t.Fatalf("/turnlog-fork: %s", pi.Notes[len(pi.Notes)-1])
	}
	child := sessionRef{gw: gw, loc: agenthost.Location{Namespace: m[2], Session: m[3], UID: m[4]}}
	if child.loc != (agenthost.Location{Namespace: "team-a", Session: "chat-fork-child", UID: "c41d-child"}) {
		t.Fatalf("/turnlog-fork: %s", pi.Notes[len(pi.Notes)-1])
	}
	// A child that has a log is never written again.
	pi.Call(map[string]any{"type": "prompt", "message": fork})
	if last := pi.Notes[len(pi.Notes)-1]; !strings.HasPrefix(last, "turnlog-fork: the fork's child team-a/chat-fork-child/c41d-child/ already has a log") {
		t.Errorf("a second fork into the same child: %s", last)
	}
	childLog := child.export(t)
	parentLog = parent.export(t) // the fork waited for everything pi did to be in it
	var cut int
	fmt.Sscan(m[1], &cut)
	if want := bytes.Join(bytes.SplitAfter(parentLog, []byte("\n"))[:cut+1], nil); !bytes.Equal(childLog, want) {
		t.Fatalf("the child's log is not the parent's through seq %d:\n%s", cut, childLog)
	}
	if ev := validate(t, childLog); ev[len(ev)-1].Type != turnlog.TypeTurnEnd {
		t.Fatalf("the cut at seq %d is not a turn's end", cut)
	}
	// The manager's workers replay the child once it exists.
	tgt := agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "fake", Model: "model-a", ReleaseLine: "1"}
	child.stored(t, tgt)

	pi.Call(map[string]any{"type": "prompt", "message": "/turnlog-open " + strings.Join([]string{m[2], m[3], m[4]}, "/")})
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "Sunny, in the child."}}, Stop: "end_turn"})
	pi.Prompt(second)
	childFirst := prov.Requests()[3]
	file, _ := pi.Call(map[string]any{"type": "get_state"})["sessionFile"].(string)
	pi.Quit()

	for _, k := range []string{"system", "tools", "messages", "model", "thinking"} {
		if !reflect.DeepEqual(childFirst[k], parentSecond[k]) {
			g, _ := json.MarshalIndent(childFirst[k], "", " ")
			w, _ := json.MarshalIndent(parentSecond[k], "", " ")
			t.Errorf("the child's first request differs from the parent's second in %q:\nchild  %s\nparent %s", k, g, w)
		}
	}
	if t.Failed() {
		return
	}
	// The child's log goes on from the cut, and its transcript is what pi
	// resumes the child's session with.
	log := child.export(t)
	events = validate(t, log)
	if !bytes.HasPrefix(log, childLog) || len(events) <= cut+1 {
		t.Fatalf("the child's log does not go on from the cut:\n%s", log)
	}
	checkStreams(t, events)
	pc := resumeOf(t, e, file)
	tr := child.stored(t, target(pc))
	if d := sameAsPi(t, tr.Messages, pc, target(pc)); d != "" {
		t.Fatalf("the child's stored transcript differs from pi's context: %s", d)
	}
	if testing.Verbose() {
		t.Logf("the child's log:\n%s", log)
	}
	t.Logf("forked at seq %d; the child's first request carried %d messages, its log has %d events", cut, len(childFirst["messages"].([]any)), len(events))
}
