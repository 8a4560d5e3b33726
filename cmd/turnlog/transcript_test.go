package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/testutil/controlplane"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/worker"
)

// startAPIServer starts kube-apiserver and etcd with turnlog's CRDs and
// returns a client and a kubeconfig file for the CLI.
func startAPIServer(t *testing.T) (client.Client, string) {
	t.Helper()
	cp := controlplane.Start(t, filepath.Join("..", ".."), controlplane.Options{})
	return cp.Client, cp.Kubeconfig
}

// turns splits a log file into its turns: each part ends with a turn/end.
func turns(t *testing.T, log string) []string {
	var parts []string
	var cur strings.Builder
	for line := range strings.Lines(log) {
		cur.WriteString(line)
		if strings.Contains(line, `"type":"turn/end"`) {
			parts = append(parts, cur.String())
			cur.Reset()
		}
	}
	if cur.Len() > 0 {
		parts = append(parts, cur.String())
	}
	return parts
}

// transcriptIsReplayOfExport: a Session is written turn by turn with
// `turnlog import` and `turnlog append`, the replay worker runs after each
// write (as the manager runs it after each nudge), and `turnlog transcript`
// then prints exactly the bytes `turnlog replay` prints for the exported
// log — for logs with degraded messages (legacy state, a misaligned
// envelope, a model switch), aborted turns, tool calls without results,
// truncated tool calls, unknown events, and a fork's child log; for the
// default target and for a Session with its own spec.adapter.
func TestSessionCommands(t *testing.T) {
	kube, kubeconfig := startAPIServer(t)
	t.Run("transcript is replay of export", func(t *testing.T) { transcriptIsReplayOfExport(t, kube, kubeconfig) })
	t.Run("import pi-session", func(t *testing.T) { importPiSession(t, kube, kubeconfig) })
}

func transcriptIsReplayOfExport(t *testing.T, kube client.Client, kubeconfig string) {
	dir := t.TempDir()
	storeURL := "file://" + dir
	bucket, err := store.Open(context.Background(), storeURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	ctx := context.Background()
	k := []string{"--kubeconfig", kubeconfig, "-n", "default", "--store-url", storeURL}

	forkChild := runOK(t, "", "cut", "--at", "13.1", logs+"aborted-turn.jsonl")
	cases := []struct {
		name, log string
		adapter   turnlogv1.Adapter
		flags     []string // the same target for `turnlog replay`
	}{
		{"aborted", readLog(t, "aborted-turn.jsonl"), turnlogv1.Adapter{}, nil},
		{"legacy", readLog(t, "legacy-flat-state.jsonl"), turnlogv1.Adapter{}, nil},
		{"misaligned", readLog(t, "misaligned-envelope.jsonl"), turnlogv1.Adapter{}, nil},
		{"model-switch", readLog(t, "model-switch.jsonl"), turnlogv1.Adapter{}, nil},
		{"model-switch-gpt5", readLog(t, "model-switch.jsonl"),
			turnlogv1.Adapter{Kind: "pi-ai", API: "openai-responses", Provider: "openai", Model: "gpt-5"},
			[]string{"--kind", "pi-ai", "--api", "openai-responses", "--provider", "openai", "--model", "gpt-5"}},
		{"no-result", readLog(t, "tool-call-without-result.jsonl"), turnlogv1.Adapter{}, nil},
		{"max-tokens", readLog(t, "max-tokens-tool-call.jsonl"), turnlogv1.Adapter{}, nil},
		{"length-two", readLog(t, "length-two-tool-calls.jsonl"), turnlogv1.Adapter{}, nil},
		{"unknown-event", readLog(t, "unknown-event.jsonl"), turnlogv1.Adapter{}, nil},
		{"fork-child", forkChild, turnlogv1.Adapter{}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			session := &turnlogv1.Session{}
			session.Namespace, session.Name, session.Spec.Adapter = "default", tc.name, tc.adapter
			if err := kube.Create(ctx, session); err != nil {
				t.Fatal(err)
			}
			_, errOut, code := cli(t, "", append([]string{"transcript", "--session", tc.name}, k...)...)
			if want := "turnlog transcript: Session default/" + tc.name + " has not been replayed for target"; code != 1 || !strings.HasPrefix(errOut, want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("before any replay: exit %d, stderr %q; want exit 1 and one line starting %q", code, errOut, want)
			}
			log, err := sessionlog.New(bucket).Log(sessionlog.Location{Namespace: "default", Session: tc.name, UID: string(session.UID)})
			if err != nil {
				t.Fatal(err)
			}
			target := turnlog.Adapter{Kind: tc.adapter.Kind, API: tc.adapter.API, Provider: tc.adapter.Provider, Model: tc.adapter.Model}
			for i, part := range turns(t, tc.log) {
				verb := "append"
				if i == 0 {
					verb = "import"
				}
				args := append([]string{verb, "--session", tc.name}, k...)
				if verb == "import" {
					args = append(args, "-")
				}
				runOK(t, part, args...)
				if _, err := worker.Replay(ctx, derived.StoreLog{Log: log}, target); err != nil {
					t.Fatalf("replay run %d: %v", i, err)
				}
			}
			got := runOK(t, "", append([]string{"transcript", "--session", tc.name}, k...)...)
			exported := runOK(t, "", append([]string{"export", "--session", tc.name}, k...)...)
			if exported != tc.log {
				t.Fatalf("export differs from what was written")
			}
			want := runOK(t, exported, append(append([]string{"replay"}, tc.flags...), "-")...)
			if got != want {
				t.Errorf("turnlog transcript differs from turnlog replay of the export:\n--- transcript\n%s\n--- replay\n%s", got, want)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(got), &v); err != nil {
				t.Fatal(err)
			}
			checkContract(t, "replay", v)
			if len(tc.flags) > 0 {
				// Another target than the Session's has no stored transcript.
				_, errOut, code := cli(t, "", append([]string{"transcript", "--session", tc.name, "--model", "gpt-4o"}, k...)...)
				if code != 1 || !strings.Contains(errOut, "has not been replayed for target pi-ai/openai-responses/openai/gpt-4o yet") {
					t.Errorf("another target: exit %d, stderr %q", code, errOut)
				}
			}
		})
	}

	_, errOut, code := cli(t, "", append([]string{"transcript", "--session", "nope"}, k...)...)
	if code != 1 || !strings.HasPrefix(errOut, `turnlog transcript: Session default/nope: `) || !strings.Contains(errOut, "not found") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("missing Session: exit %d, stderr %q", code, errOut)
	}
}

// importPiSession imports the session files pi-coding-agent's own
// SessionManager wrote (test/pi/0.73/make-sessions.mjs): the log is the
// package's conversion of the file, the Session records where the pi
// session came from, --leaf picks a branch, and a bad file is one line
// naming its line and field and leaves no Session behind.
func importPiSession(t *testing.T, kube client.Client, kubeconfig string) {
	const piDir = "../../test/pi/0.73"
	if _, err := os.Stat(filepath.Join(piDir, "node_modules", "@mariozechner", "pi-coding-agent")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pi-coding-agent is not installed in %s (run `make pi-deps`)", piDir)
		}
		t.Skip("pi-coding-agent is not installed; run `make pi-deps`")
	}
	dir := t.TempDir()
	cmd := exec.Command("node", "make-sessions.mjs", dir)
	cmd.Dir = piDir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node make-sessions.mjs: %v", err)
	}
	var cases []struct {
		Name, File, ParentSession string
		Leaf                      *string
		Messages                  []json.RawMessage
	}
	if err := json.Unmarshal(out, &cases); err != nil {
		t.Fatal(err)
	}
	k := []string{"--kubeconfig", kubeconfig, "-n", "default", "--store-url", "file://" + t.TempDir()}
	for _, pc := range cases {
		name := "pi-" + pc.Name
		args := append([]string{"import", "--format", "pi-session", "--session", name}, k...)
		leaf := ""
		if pc.Leaf != nil {
			leaf = *pc.Leaf
			args = append(args, "--leaf", leaf)
		}
		got := runOK(t, "", append(args, pc.File)...)
		f, err := os.Open(pc.File)
		if err != nil {
			t.Fatal(err)
		}
		s, err := agenthost.ReadPiSession(f, pc.File, leaf)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("session/%s: imported %d events into namespace default\n", name, len(s.Events)); got != want {
			t.Errorf("%s: stdout %q, want %q", pc.Name, got, want)
		}
		var want strings.Builder
		s.WriteLog(&want)
		if exported := runOK(t, "", append([]string{"export", "--session", name}, k...)...); exported != want.String() {
			t.Errorf("%s: the exported log is not the converted file", pc.Name)
		}
		session := &turnlogv1.Session{}
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, session); err != nil {
			t.Fatal(err)
		}
		if a := session.Annotations; a[agenthost.AnnotationPiSession] != s.ID || a[agenthost.AnnotationPiParentSession] != pc.ParentSession {
			t.Errorf("%s: annotations %v, want pi session %q, parent %q", pc.Name, a, s.ID, pc.ParentSession)
		}
	}

	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"type":"session","version":3,"id":"b"}`+"\n"+`{"type":"message","id":"m1","parentId":"gone","message":{"role":"user","content":"x"}}`+"\n"), 0o644)
	_, errOut, code := cli(t, "", append([]string{"import", "--format", "pi-session", "--session", "pi-bad"}, append(k, bad)...)...)
	if want := "turnlog import: " + bad + `: line 2: parentId: no entry "gone" in the file` + "\n"; code != 1 || errOut != want {
		t.Errorf("bad file: exit %d, stderr %q; want exit 1, %q", code, errOut, want)
	}
	err = kube.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "pi-bad"}, &turnlogv1.Session{})
	if err == nil {
		t.Errorf("a bad file left a Session behind")
	}
}
