package pirecord

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// TestSurvivesSIGKILLMidStream: pi is killed (SIGKILL) while a response
// streams and started again on the same session. The log keeps every event
// the package had acknowledged, once; the cut response ends as aborted; the
// log validates; and the Session's transcript is again what pi resumes with.
func TestSurvivesSIGKILLMidStream(t *testing.T) {
	gw := versitygw.Start(t)
	prov := newProvider(t)
	ref := sessionRef{gw: gw, loc: agenthost.Location{Namespace: "team-a", Session: "chat-kill", UID: "7a1d-kill"}}
	e := newEnv(t, prov, gw.URL, gw, ref.loc.Namespace, ref.loc.Session, ref.loc.UID)
	pi := e.Start()
	prov.Queue(
		reply{Blocks: []block{{Kind: "tool_use", ID: "toolu_k1", Name: "read", Text: `{"path":"notes.txt"}`}}, Stop: "tool_use"},
		reply{Blocks: []block{{Kind: "text", Text: "Tuesday."}}, Stop: "end_turn"},
	)
	pi.Prompt("When is the launch?")
	file, _ := pi.Call(map[string]any{"type": "get_state"})["sessionFile"].(string)

	const cut = "It was a dark and stormy night; the servers hummed"
	prov.Queue(reply{Blocks: []block{{Kind: "thinking", Text: "A story, then.", Sig: "sig-k"}, {Kind: "text", Text: cut}}, Hang: true})
	pi.Call(map[string]any{"type": "prompt", "message": "Tell me a story."})
	<-prov.Hanging
	// Wait until the package says the streamed chunks are in the store.
	acked := 0
	pi.WaitFor("an acknowledgement of the streamed chunks", func(r map[string]any) bool {
		acked = ackedEvents(pi.Status)
		return r["method"] == "setStatus" && acked > 0 && strings.Contains(string(ref.export(t)), `"chunk"`) && lastIsChunk(t, ref.export(t))
	})
	before := ref.export(t)
	pi.Kill()

	// Started again as a user would, with the package in pi's settings.
	e.Install()
	pi = e.Start("--session", file)
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "Fine, no story."}}, Stop: "end_turn"})
	pi.Prompt("Never mind.")
	pi.Quit()

	log := ref.export(t)
	if !strings.HasPrefix(string(log), string(before)) {
		t.Fatalf("the log before the kill is not a prefix of the log after it")
	}
	events := validate(t, log)
	if stored := strings.Count(string(before), "\n"); acked > stored || len(events) <= stored {
		t.Fatalf("acknowledged %d events before the kill, the store had %d then, the log has %d now", acked, stored, len(events))
	}
	checkStreams(t, events)
	// The cut response: streamed, then finished as aborted when pi came back.
	cutAt := -1
	for i, ev := range events {
		if ev.Type == turnlog.TypeChunk && strings.Contains(string(ev.Raw), `"text":"`) && strings.Contains(cut, textOf(t, ev)) && cutAt < 0 {
			cutAt = i
		}
	}
	if cutAt < 0 {
		t.Fatalf("no chunk of the cut response in the log")
	}
	var finish, end *turnlog.Event
	for i := cutAt; i < len(events); i++ {
		if ev := &events[i]; ev.Type == turnlog.TypeResponseFinish && finish == nil {
			finish = ev
		} else if ev.Type == turnlog.TypeTurnEnd && end == nil {
			end = ev
		}
	}
	if finish == nil || !strings.Contains(string(finish.Raw), `"stopReason":"aborted"`) || end == nil || !strings.Contains(string(end.Raw), `"reason":"aborted"`) {
		t.Fatalf("the cut response does not end as aborted: finish %s, turn end %s", rawOf(finish), rawOf(end))
	}
	n := compareEveryTurn(t, e, ref, log, events, file)
	t.Logf("%d events acknowledged before the kill, %d in the log after the restart; %d transcripts equal pi's context", acked, len(events), n)
}

var ackRE = regexp.MustCompile(`: (\d+) events`)

// ackedEvents reads the package's status line: how many events are in the log.
func ackedEvents(status string) int {
	m := ackRE.FindStringSubmatch(status)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func lastIsChunk(t *testing.T, log []byte) bool {
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	var e struct{ Type string }
	_ = json.Unmarshal([]byte(lines[len(lines)-1]), &e)
	return e.Type == "chunk"
}

func textOf(t *testing.T, ev turnlog.Event) string {
	var m struct{ Delta struct{ Text string } }
	_ = json.Unmarshal(ev.Raw, &m)
	if m.Delta.Text == "" {
		return "\x00"
	}
	return m.Delta.Text
}

func rawOf(ev *turnlog.Event) string {
	if ev == nil {
		return "none"
	}
	return string(ev.Raw)
}
