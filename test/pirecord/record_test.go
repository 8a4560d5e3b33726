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
	e.Exts = append(e.Exts, ext)
	pi := e.Start()

	prov.Queue(
		reply{Blocks: []block{
			{Kind: "thinking", Text: "The user wants the notes; read the file.", Sig: "sig-think-1"},
			{Kind: "text", Text: "Let me read the notes."},
			{Kind: "tool_use", ID: "toolu_01", Name: "read", Text: `{"path":"notes.txt"}`},
		}, Stop: "tool_use"},
		reply{Blocks: []block{{Kind: "text", Text: "The notes say the launch is on Tuesday."}}, Stop: "end_turn"},
	)
	pi.Prompt("What do my notes say?")
	// An extension edits an answer and inserts a message; a shell command's
	// output goes into the context.
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "A long answer to shorten: EDIT-ME."}}, Stop: "end_turn"})
	pi.Prompt("Explain at length.")
	if out := pi.Call(map[string]any{"type": "bash", "command": "echo shell-output"}); out["exitCode"] != float64(0) {
		t.Fatalf("pi bash: %v", out)
	}
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "In one word: Tues"}}, Stop: "max_tokens"})
	pi.Prompt("Say it in one word.")

	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "Once upon a time, in a land far away"}}, Hang: true})
	pi.Call(map[string]any{"type": "prompt", "message": "Tell me a long story."})
	<-prov.Hanging
	pi.Call(map[string]any{"type": "abort"})
	pi.Settle()

	prov.Queue(reply{Status: 400})
	pi.Prompt("Try once more.")

	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "The user read notes about a Tuesday launch and asked for a story."}}, Stop: "end_turn"})
	pi.Call(map[string]any{"type": "compact"})

	pi.Call(map[string]any{"type": "set_model", "provider": "fake", "modelId": "model-b"})
	prov.Queue(
		reply{Blocks: []block{
			{Kind: "thinking", Text: "Check the notes again.", Sig: "sig-think-2"},
			{Kind: "tool_use", ID: "toolu_02", Name: "read", Text: `{"path":"notes.txt"}`},
		}, Stop: "tool_use"},
		reply{Blocks: []block{{Kind: "thinking", Text: "Still Tuesday.", Sig: "sig-think-3"}, {Kind: "text", Text: "Still Tuesday."}}, Stop: "end_turn"},
	)
	pi.Prompt("Check again, please.")
	state := pi.Call(map[string]any{"type": "get_state"})
	file, _ := state["sessionFile"].(string)
	pi.Quit()
	if n := prov.Pending(); n != 0 {
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
	pi := e.Start()
	prov.Queue(
		reply{Blocks: []block{
			{Kind: "thinking", Text: "Read the notes first.", Sig: "sig-file-1"},
			{Kind: "tool_use", ID: "toolu_f1", Name: "read", Text: `{"path":"notes.txt"}`},
		}, Stop: "tool_use"},
		reply{Blocks: []block{{Kind: "text", Text: "The launch is on Tuesday."}}, Stop: "end_turn"},
	)
	pi.Prompt("When is the launch?")
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "You are welcome."}}, Stop: "end_turn"})
	pi.Prompt("Thanks.")
	state := pi.Call(map[string]any{"type": "get_state"})
	file, _ := state["sessionFile"].(string)
	pi.Quit()

	log := ref.export(t)
	events := validate(t, log)
	if n := compareEveryTurn(t, e, ref, log, events, file); n < 2 {
		t.Fatalf("%d transcripts compared with pi's context, want one per turn (2)", n)
	}
}
