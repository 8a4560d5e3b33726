package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const logs = "../../testdata/logs/"

// turnlogBin is the turnlog binary built by TestMain: the tests run the
// command a user runs, so exit codes, stdout and stderr are the process's own.
var turnlogBin string

func TestMain(m *testing.M) {
	os.Exit(runWithBinary(m))
}

func runWithBinary(m *testing.M) int {
	dir, err := os.MkdirTemp("", "turnlog-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cli tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	turnlogBin = filepath.Join(dir, "turnlog")
	if out, err := exec.Command("go", "build", "-o", turnlogBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "cli tests: go build ./cmd/turnlog failed: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// cli runs the built turnlog binary with stdin as its standard input. Output
// on stderr is never a stack trace, whatever the command.
func cli(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(turnlogBin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("turnlog %s: %v", strings.Join(args, " "), err)
	}
	if strings.Contains(errOut.String(), "goroutine ") || strings.Contains(errOut.String(), "panic:") {
		t.Errorf("turnlog %s: stack trace on stderr:\n%s", strings.Join(args, " "), errOut.String())
	}
	return out.String(), errOut.String(), code
}

// decode unmarshals the JSON output of command into a generic value to
// query, after checking it against the command's contract.
func decode(t *testing.T, command, out string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	checkContract(t, command, v)
	return v
}

// path walks a decoded JSON value: path(v, "messages", 1, "message", "content").
func path(t *testing.T, v any, keys ...any) any {
	t.Helper()
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("no member %q in %v", k, v)
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				t.Fatalf("no element %d in %v", k, v)
			}
			v = a[k]
		}
	}
	return v
}

func compact(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAssembleMaxTokensToolCall(t *testing.T) {
	out, errOut, code := cli(t, "", "assemble", logs+"max-tokens-tool-call.jsonl")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	v := decode(t, "assemble", out)
	msg := path(t, v, "messages", 0)
	if path(t, msg, "seq") != 10.0 || path(t, msg, "turn") != 1.0 || path(t, msg, "response") != 0.0 {
		t.Errorf("first message header %v, want seq 10 turn 1 response 0", compact(t, msg))
	}
	var types []string
	for _, b := range path(t, msg, "message", "content").([]any) {
		types = append(types, path(t, b, "type").(string))
	}
	if strings.Join(types, ",") != "thinking,text" {
		t.Errorf("content types %v, want the tool call dropped", types)
	}
	entries := compact(t, path(t, msg, "message", "replayState", "blocks"))
	if entries != `[{"signature":"EqQBCkYIBxgCKkDx3c1b9f2Q0a7rWkq8mXyL1Thinking01","type":"thinking"},{"signature":"txt_01HZX3Q7Y8D2K4M6N8P0R2T4V6","type":"text"}]` {
		t.Errorf("envelope entries %s, want the tool call's entry pruned and the others kept", entries)
	}
	if d := path(t, v, "diagnostics").([]any); len(d) != 0 {
		t.Errorf("diagnostics %v, want none", d)
	}
}

func TestReplayMaxTokensContinuesNative(t *testing.T) {
	out, errOut, code := cli(t, "", "replay", logs+"max-tokens-tool-call.jsonl")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	v := decode(t, "replay", out)
	if got := summarize(t, v); got != "2:user 10:assistant/native 13:user 17:assistant/native" {
		t.Errorf("transcript %s", got)
	}
	if strings.Contains(out, "toolCall") || strings.Contains(out, "toolResult") {
		t.Error("the truncated tool call (or a result for it) reached the transcript")
	}
	if got := path(t, v, "messages", 1, "message", "content", 0, "thinkingSignature"); got != "EqQBCkYIBxgCKkDx3c1b9f2Q0a7rWkq8mXyL1Thinking01" {
		t.Errorf("kept thinking block lost its signature: %v", got)
	}
}

func summarize(t *testing.T, v map[string]any) string {
	t.Helper()
	var parts []string
	for _, m := range path(t, v, "messages").([]any) {
		s := compact(t, path(t, m, "seq")) + ":" + path(t, m, "role").(string)
		if mode, ok := m.(map[string]any)["replay"]; ok {
			s += "/" + mode.(string)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func TestReplayLegacyStateDegrades(t *testing.T) {
	out, errOut, code := cli(t, "", "replay", logs+"legacy-flat-state.jsonl")
	if code != 0 {
		t.Fatalf("exit %d, want 0 (a degraded message is not a failure): %s", code, errOut)
	}
	v := decode(t, "replay", out)
	if got := summarize(t, v); got != "2:user 3:assistant/foreign 6:user 10:assistant/native" {
		t.Errorf("transcript %s", got)
	}
	d := path(t, v, "diagnostics", 0)
	if path(t, d, "code") != "INVALID_REPLAY_STATE" || path(t, d, "seq") != 3.0 || path(t, d, "cause") != "version" || path(t, d, "message") == "" {
		t.Errorf("diagnostic %s", compact(t, d))
	}
	if got := compact(t, path(t, v, "counts")); got != `{"degraded":1,"foreign":1,"native":1,"orphanToolResults":0}` {
		t.Errorf("counts %s", got)
	}
}

func TestReplayFlags(t *testing.T) {
	out, _, code := cli(t, "", "replay", logs+"max-tokens-tool-call.jsonl", "--through", "12", "--model", "claude-haiku-4-5")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	v := decode(t, "replay", out)
	if path(t, v, "throughSeq") != 12.0 || summarize(t, v) != "2:user 10:assistant/foreign" {
		t.Errorf("through 12 for another model: throughSeq %v transcript %s", path(t, v, "throughSeq"), summarize(t, v))
	}
	if got := compact(t, path(t, v, "messages", 1, "message", "content")); got != `[{"text":"I'll search the repository for TODO markers.","type":"text"}]` {
		t.Errorf("foreign content %s, want pi-ai 1.x's: another model's thinking dropped", got)
	}

	// --release-line 0.73 follows pi-ai 0.73: the thinking becomes text.
	out, _, code = cli(t, "", "replay", logs+"max-tokens-tool-call.jsonl", "--through", "12", "--model", "claude-haiku-4-5", "--release-line", "0.73")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	v = decode(t, "replay", out)
	if got := compact(t, path(t, v, "messages", 1, "message", "content")); got != `[{"text":"The user wants the TODOs. Grep is the quickest way.","type":"text"},{"text":"I'll search the repository for TODO markers.","type":"text"}]` {
		t.Errorf("foreign content on 0.73 %s", got)
	}

	_, errOut, code := cli(t, "", "replay", logs+"max-tokens-tool-call.jsonl", "--release-line", "0.8")
	if code != 2 || !strings.Contains(errOut, `invalid value "0.8" for flag -release-line: release line "0.8" is not one turnlog replays by: want "1" or "0.73"`) {
		t.Errorf("--release-line 0.8: exit %d, stderr %q", code, errOut)
	}
}

func TestForkAtFrozenNodeOfAbortedTurn(t *testing.T) {
	out, errOut, code := cli(t, "", "fork-point", "--at", "14.1", logs+"aborted-turn.jsonl")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got := compact(t, decode(t, "fork-point", out)); got != `{"anchorSeq":14,"atSeq":"14.1","cutReason":"aborted","cutSeq":15,"cutTurn":2}` {
		t.Errorf("fork point %s", got)
	}

	child, errOut, code := cli(t, "", "cut", "--at", "14.1", logs+"aborted-turn.jsonl")
	if code != 0 {
		t.Fatalf("cut: exit %d: %s", code, errOut)
	}
	source := readLog(t, "aborted-turn.jsonl")
	if want := strings.Join(strings.SplitAfter(source, "\n")[:16], ""); child != want {
		t.Errorf("child log is not events 0..15 of the source byte for byte:\n%s", child)
	}
	fromStdin, _, _ := cli(t, source, "cut", "--at", "14.1", "-")
	if fromStdin != child {
		t.Error("cut from stdin differs from cut from the file")
	}

	out, _, code = cli(t, child, "replay", "-")
	if code != 0 {
		t.Fatalf("replay of the child: exit %d", code)
	}
	if strings.Contains(out, "Object storage began") {
		t.Error("frozen partial text of the aborted turn entered the child's transcript")
	}
	if got := summarize(t, decode(t, "replay", out)); got != "2:user 6:assistant/native 9:user" {
		t.Errorf("child transcript %s", got)
	}
}

func TestUnknownEventsSurvive(t *testing.T) {
	source := readLog(t, "unknown-event.jsonl")
	child, errOut, code := cli(t, "", "cut", "--at", "3", logs+"unknown-event.jsonl")
	if code != 0 || child != source {
		t.Errorf("cut through the last turn: exit %d (%s); output differs from the source:\n%s", code, errOut, child)
	}
	out, _, code := cli(t, "", "replay", logs+"unknown-event.jsonl")
	if code != 0 || summarize(t, decode(t, "replay", out)) != "3:user 7:assistant/native" {
		t.Errorf("replay: exit %d transcript %s", code, out)
	}
}

func TestAssembleMisalignedEnvelope(t *testing.T) {
	out, _, code := cli(t, "", "assemble", logs+"misaligned-envelope.jsonl")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	v := decode(t, "assemble", out)
	if _, has := path(t, v, "messages", 0, "message").(map[string]any)["replayState"]; has {
		t.Error("message kept a misaligned envelope")
	}
	d := path(t, v, "diagnostics", 0)
	if path(t, d, "code") != "ENVELOPE_MISALIGNED" || path(t, d, "seq") != 6.0 {
		t.Errorf("diagnostic %s", compact(t, d))
	}
	out, _, _ = cli(t, "", "replay", logs+"misaligned-envelope.jsonl")
	if v := decode(t, "replay", out); summarize(t, v) != "2:user 6:assistant/foreign" || len(path(t, v, "diagnostics").([]any)) != 0 {
		t.Errorf("replay of a message stored without state: %s", out)
	}
}

func TestValidate(t *testing.T) {
	out, errOut, code := cli(t, "", "validate", logs+"invalid-structure.jsonl")
	want := []string{
		logs + `invalid-structure.jsonl: line 3: malformed JSON at byte 90: unexpected end of JSON input`,
		logs + `invalid-structure.jsonl: line 5 (seq 4): turn/end with no open turn`,
		logs + `invalid-structure.jsonl: line 7 (seq 6): seq gap: want 5, 1 event(s) missing`,
		logs + `invalid-structure.jsonl: line 8 (seq 7): chunk: missing field "block"`,
	}
	if code != 1 || !reflect.DeepEqual(strings.Split(strings.TrimSpace(out), "\n"), want) {
		t.Errorf("exit %d, output:\n%s\nwant:\n%s", code, out, strings.Join(want, "\n"))
	}
	if !strings.Contains(errOut, "4 problem(s)") {
		t.Errorf("stderr %q, want a count of the problems", errOut)
	}
	for _, name := range []string{"aborted-turn", "legacy-flat-state", "max-tokens-tool-call", "misaligned-envelope", "unknown-event"} {
		if out, _, code := cli(t, "", "validate", logs+name+".jsonl"); code != 0 {
			t.Errorf("%s: exit %d: %s", name, code, out)
		}
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"missing file", []string{"replay", "nope.jsonl"}, 1, "turnlog replay: open nope.jsonl: no such file or directory"},
		{"malformed log", []string{"assemble", logs + "invalid-structure.jsonl"}, 1, "turnlog assemble: " + logs + "invalid-structure.jsonl: line 3: malformed JSON at byte 90"},
		{"bad --at", []string{"fork-point", "--at", "-1", logs + "aborted-turn.jsonl"}, 2, `turnlog fork-point: --at: atSeq "-1": must be a non-negative decimal such as "41" or "41.1"`},
		{"NaN --at", []string{"cut", "--at", "NaN", logs + "aborted-turn.jsonl"}, 2, `turnlog cut: --at: atSeq "NaN"`},
		{"no --session: import", []string{"import", logs + "aborted-turn.jsonl"}, 2, "turnlog import: --session is required"},
		{"no --session: append", []string{"append"}, 2, "turnlog append: --session is required"},
		{"no --session: export", []string{"export"}, 2, "turnlog export: --session is required"},
		{"no --session: transcript", []string{"transcript"}, 2, "turnlog transcript: --session is required"},
		{"unknown flag: export", []string{"export", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"unknown flag: worker", []string{"worker", "assemble", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"anchor beyond head", []string{"cut", "--at", "99", logs + "aborted-turn.jsonl"}, 1, `aborted-turn.jsonl: atSeq "99": anchor seq 99 is beyond the log's head (seq 21)`},
		{"missing --at", []string{"fork-point", logs + "aborted-turn.jsonl"}, 2, "--at is required"},
		{"unknown flag", []string{"replay", "--bogus", logs + "aborted-turn.jsonl"}, 2, "flag provided but not defined: -bogus"},
		{"no log argument", []string{"validate"}, 2, "want one log FILE"},
		{"unknown command", []string{"frobnicate"}, 2, `turnlog: unknown command "frobnicate" (run "turnlog help" for the list)`},
		{"no command", nil, 2, "usage: turnlog COMMAND"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := cli(t, "", tt.args...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("exit %d stderr %q, want exit %d and %q", code, errOut, tt.wantCode, tt.wantErr)
			}
			if tt.wantCode == 1 && (strings.Count(errOut, "\n") != 1 || out != "") {
				t.Errorf("a failure must be one line on stderr and nothing on stdout; got stderr %q stdout %q", errOut, out)
			}
		})
	}
}

func TestHelpListsCommands(t *testing.T) {
	out, _, code := cli(t, "", "help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, name := range []string{"assemble", "replay", "fork-point", "cut", "validate"} {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("help does not list %s:\n%s", name, out)
		}
	}
	if out, _, code := cli(t, "", "help", "replay"); code != 0 || !strings.Contains(out, "-through") {
		t.Errorf("help replay: exit %d\n%s", code, out)
	}
}

// An edit that brings back a message an earlier edit removed reads the log
// again: from a file, and from stdin, which replay keeps for that.
func TestReplayBringsBackWhatAnEarlierEditRemoved(t *testing.T) {
	log := `{"seq":0,"type":"turn/start","turn":1}
{"seq":1,"type":"user/message","turn":1,"content":"my password is hunter2"}
{"seq":2,"type":"assistant/message","turn":1,"response":0,"message":{"content":[{"type":"text","text":"noted"}],"stopReason":"stop"}}
{"seq":3,"type":"turn/end","turn":1,"reason":"stop"}
{"seq":4,"type":"context/edit","targetSeq":1,"replacement":null}
{"seq":5,"type":"context/edit","targetSeq":1,"replacement":{"content":"my password is [redacted]"}}
`
	file := filepath.Join(t.TempDir(), "edits.jsonl")
	if err := os.WriteFile(file, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{file, "-"} {
		out, errOut, code := cli(t, log, "replay", arg)
		if code != 0 {
			t.Fatalf("turnlog replay %s: exit %d: %s", arg, code, errOut)
		}
		v := decode(t, "replay", out)
		if got := path(t, v, "messages", 0, "message", "content"); got != "my password is [redacted]" {
			t.Errorf("turnlog replay %s: the first message is %v, want the edited one back", arg, got)
		}
		if got := path(t, v, "context", "edits"); got != 2.0 {
			t.Errorf("turnlog replay %s: %v edits applied, want 2", arg, got)
		}
	}
}
