package pirecord

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
)

// TestRecordsALivePiSession: the real pi 1.6.0 with the package loaded
// talks to a fake provider through several turns — a tool call with signed
// reasoning, a max-tokens stop, an aborted stream, a provider error, a
// compaction, a model change — while the package records it into a Session
// on versitygw. The log validates, and the transcript the workers store
// from it is what pi itself resumes the session with, message for message.
func TestRecordsALivePiSession(t *testing.T) {
	gw := versitygw.Start(t)
	prov := newProvider(t)
	ref := sessionRef{gw: gw, loc: agenthost.Location{Namespace: "team-a", Session: "chat-1", UID: "3f0c2a9e-live"}}
	e := newEnv(t, prov, gw.URL, gw, ref.loc.Namespace, ref.loc.Session, ref.loc.UID)
	ext, err := filepath.Abs("testdata/context-edits.ts")
	if err != nil {
		t.Fatal(err)
	}
	e.exts = append(e.exts, ext)
	pi := e.start()

	prov.queue(
		reply{blocks: []block{
			{kind: "thinking", text: "The user wants the notes; read the file.", sig: "sig-think-1"},
			{kind: "text", text: "Let me read the notes."},
			{kind: "tool_use", id: "toolu_01", name: "read", text: `{"path":"notes.txt"}`},
		}, stop: "tool_use"},
		reply{blocks: []block{{kind: "text", text: "The notes say the launch is on Tuesday."}}, stop: "end_turn"},
	)
	pi.prompt("What do my notes say?")
	// An extension edits an answer and inserts a message; a shell command's
	// output goes into the context.
	prov.queue(reply{blocks: []block{{kind: "text", text: "A long answer to shorten: EDIT-ME."}}, stop: "end_turn"})
	pi.prompt("Explain at length.")
	if out := pi.call(map[string]any{"type": "bash", "command": "echo shell-output"}); out["exitCode"] != float64(0) {
		t.Fatalf("pi bash: %v", out)
	}
	prov.queue(reply{blocks: []block{{kind: "text", text: "In one word: Tues"}}, stop: "max_tokens"})
	pi.prompt("Say it in one word.")

	prov.queue(reply{blocks: []block{{kind: "text", text: "Once upon a time, in a land far away"}}, hang: true})
	pi.call(map[string]any{"type": "prompt", "message": "Tell me a long story."})
	<-prov.hanging
	pi.call(map[string]any{"type": "abort"})
	pi.settle()

	prov.queue(reply{status: 400})
	pi.prompt("Try once more.")

	prov.queue(reply{blocks: []block{{kind: "text", text: "The user read notes about a Tuesday launch and asked for a story."}}, stop: "end_turn"})
	pi.call(map[string]any{"type": "compact"})

	pi.call(map[string]any{"type": "set_model", "provider": "fake", "modelId": "model-b"})
	prov.queue(
		reply{blocks: []block{
			{kind: "thinking", text: "Check the notes again.", sig: "sig-think-2"},
			{kind: "tool_use", id: "toolu_02", name: "read", text: `{"path":"notes.txt"}`},
		}, stop: "tool_use"},
		reply{blocks: []block{{kind: "thinking", text: "Still Tuesday.", sig: "sig-think-3"}, {kind: "text", text: "Still Tuesday."}}, stop: "end_turn"},
	)
	pi.prompt("Check again, please.")
	state := pi.call(map[string]any{"type": "get_state"})
	file, _ := state["sessionFile"].(string)
	pi.quit()
	if n := prov.pending(); n != 0 {
		t.Fatalf("%d scripted replies were never asked for", n)
	}

	log := ref.export(t)
	events := validate(t, log)
	if testing.Verbose() {
		t.Logf("the log: %d events\n%s", len(events), log)
	}
	for _, typ := range []string{"context/edit", "context/message", "context/compaction", "pi/model_change"} {
		if !bytes.Contains(log, []byte(`"type":"`+typ+`"`)) {
			t.Errorf("no %s event in the log", typ)
		}
	}
	streams := checkStreams(t, events)
	n := compareEveryTurn(t, e, ref, log, events, file)
	t.Logf("%d events, %d streamed responses; %d transcripts equal pi's context", len(events), streams, n)
}

// TestRecordsIntoAFileStore: as on `make dev`, whose store is a local
// directory, the package records into a file:// store — the layout the
// manager, its workers and the CLI use — and what it wrote validates and
// replays into what pi itself resumes the session with.
func TestRecordsIntoAFileStore(t *testing.T) {
	prov := newProvider(t)
	ref := sessionRef{fileURL: "file://" + t.TempDir(), loc: agenthost.Location{Namespace: "default", Session: "chat-file", UID: "5f1e-file"}}
	e := newEnv(t, prov, ref.storeURL(), nil, ref.loc.Namespace, ref.loc.Session, ref.loc.UID)
	pi := e.start()
	prov.queue(
		reply{blocks: []block{
			{kind: "thinking", text: "Read the notes first.", sig: "sig-file-1"},
			{kind: "tool_use", id: "toolu_f1", name: "read", text: `{"path":"notes.txt"}`},
		}, stop: "tool_use"},
		reply{blocks: []block{{kind: "text", text: "The launch is on Tuesday."}}, stop: "end_turn"},
	)
	pi.prompt("When is the launch?")
	prov.queue(reply{blocks: []block{{kind: "text", text: "You are welcome."}}, stop: "end_turn"})
	pi.prompt("Thanks.")
	state := pi.call(map[string]any{"type": "get_state"})
	file, _ := state["sessionFile"].(string)
	pi.quit()

	log := ref.export(t)
	events := validate(t, log)
	if n := compareEveryTurn(t, e, ref, log, events, file); n < 2 {
		t.Fatalf("%d transcripts compared with pi's context, want one per turn (2)", n)
	}
}
