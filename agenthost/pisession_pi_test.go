package agenthost

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/testutil/pitest"
	"github.com/turnlog/turnlog/internal/worker"
)

// piDir is test/pi/0.73, where `make pi-deps` installs pi-coding-agent 0.73.1.
const piDir = "../test/pi/0.73"

// needPi skips without the installed pi packages, except under CI, where a
// missing install is a broken setup and fails.
func needPi(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(piDir, "node_modules", "@mariozechner", "pi-coding-agent", "package.json")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pi-coding-agent is not installed in %s (run `make pi-deps`): %v", piDir, err)
		}
		t.Skipf("pi-coding-agent is not installed in %s; run `make pi-deps`", piDir)
	}
}

type piCase struct {
	Name          string            `json:"name"`
	File          string            `json:"file"`
	Leaf          *string           `json:"leaf"`
	ParentSession string            `json:"parentSession"`
	Messages      []json.RawMessage `json:"messages"`
	Context       []json.RawMessage `json:"context"`
}

// makePiSessions runs test/pi/0.73/make-sessions.mjs: pi-coding-agent's own
// SessionManager writes the session files, and pi's own reader says which
// messages each holds.
func makePiSessions(t *testing.T) []piCase {
	needPi(t)
	cmd := exec.Command("node", "make-sessions.mjs", t.TempDir())
	cmd.Dir = piDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node make-sessions.mjs: %v\n%s", err, stderr.String())
	}
	var cases []piCase
	if err := json.Unmarshal(out, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

func decode(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return v
}

// TestImportPiSessions imports the sessions pi-coding-agent 0.73.1 wrote — a
// branched tree (its last leaf and an earlier one), a forkFrom child, files
// of versions 1 and 2, compactions (one cutting a turn, one reaching back
// before the previous one's kept entries, one in a version-1 file naming
// its kept entry by index) — and checks message for message that the log
// holds what pi reads from each file: assistant messages byte for byte
// (inline signatures and all), user messages and tool results member for
// member, other messages as pi/message events. Then the workers replay the
// log, and the stored transcript holds the messages pi resumes with (its
// convertToLlm of its context): user messages, compaction summaries, tool
// results, and the assistant messages replayed native with pi's
// signatures (unsigned ones are the same content either way); aborted ones
// left out, as pi-ai leaves them out, and a kept tool result whose call was
// compacted away too (the orphan-tool-results deviation).
func TestImportPiSessions(t *testing.T) {
	for _, pc := range makePiSessions(t) {
		t.Run(pc.Name, func(t *testing.T) {
			f, err := os.Open(pc.File)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			leaf := ""
			if pc.Leaf != nil {
				leaf = *pc.Leaf
			}
			s, err := ReadPiSession(f, filepath.Base(pc.File), leaf)
			if err != nil {
				t.Fatal(err)
			}
			if s.ParentSession != pc.ParentSession {
				t.Errorf("parent session %q, want %q", s.ParentSession, pc.ParentSession)
			}

			// The log, message for message.
			var got []json.RawMessage
			for _, ev := range s.Events {
				v := decode(t, ev.data)
				switch ev.typ {
				case "user/message":
					got = append(got, mustJSON(t, map[string]any{"role": "user", "content": v["content"]}))
				case "assistant/message":
					var m struct{ Message json.RawMessage }
					json.Unmarshal(ev.data, &m)
					got = append(got, m.Message)
				case "tool/result":
					got = append(got, mustJSON(t, map[string]any{"role": "toolResult", "toolCallId": v["toolCallId"], "toolName": v["toolName"],
						"content": v["content"], "details": v["details"], "isError": v["isError"]}))
				case "pi/message":
					var m struct {
						Entry struct{ Message json.RawMessage }
					}
					json.Unmarshal(ev.data, &m)
					got = append(got, m.Entry.Message)
				case "context/message":
					// An extension's message, as pi sends it: user-role text blocks.
					got = append(got, mustJSON(t, map[string]any{"role": "custom", "origin": v["origin"], "content": v["content"]}))
				}
			}
			if len(got) != len(pc.Messages) {
				t.Fatalf("the log holds %d messages, pi reads %d", len(got), len(pc.Messages))
			}
			for i, want := range pc.Messages {
				w := decode(t, want)
				if w["role"] == "custom" {
					w = map[string]any{"role": "custom", "origin": "extension:" + w["customType"].(string), "content": sentContent(w["content"])}
				}
				switch w["role"] {
				case "assistant":
					if !bytes.Equal(got[i], want) {
						t.Errorf("message %d: the log holds\n%s\npi wrote\n%s", i, got[i], want)
					}
				default:
					if w["role"] != "custom" {
						delete(w, "timestamp") // replay's timestamp comes from the event
					}
					if g := decode(t, got[i]); !reflect.DeepEqual(g, w) {
						t.Errorf("message %d: the log holds %v, pi wrote %v", i, g, w)
					}
				}
			}

			// The stored transcript after the workers replayed the import.
			l := openTestLog(t, memBucket(t))
			if err := l.Import(ctx(t), s.Events); err != nil {
				t.Fatal(err)
			}
			if _, err := worker.Replay(context.Background(), l.workerLog(), l.target); err != nil {
				t.Fatal(err)
			}
			tr, err := l.Transcript(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			var want []map[string]any
			for _, raw := range pc.Context {
				w := decode(t, raw)
				if w["stopReason"] == "aborted" || w["stopReason"] == "error" {
					continue // not model history
				}
				want = append(want, w)
			}
			want = pitest.Pair(want, func(map[string]any) bool { return true }, func(map[string]any) {}, func(string) {})
			if len(tr.Messages) != len(want) {
				t.Fatalf("the transcript holds %d messages, want %d", len(tr.Messages), len(want))
			}
			for i, m := range tr.Messages {
				g := decode(t, m.Message)
				signed := strings.Contains(string(mustJSON(t, want[i])), "Signature")
				if m.Role == "assistant" && signed != (m.Replay == "native") {
					t.Errorf("message %d (seq %d) replayed %s: want native exactly when the session's model signed it", i, m.Seq, m.Replay)
				}
				if !reflect.DeepEqual(g, want[i]) {
					t.Errorf("transcript message %d (seq %d):\n   got %s\n  want %s", i, m.Seq, m.Message, mustJSON(t, want[i]))
				}
			}
		})
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sentContent is an extension message's content as pi sends it: a string
// becomes one text block.
func sentContent(content any) any {
	if text, ok := content.(string); ok {
		return []any{map[string]any{"type": "text", "text": text}}
	}
	return content
}
