package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/compare"
	"github.com/turnlog/turnlog/internal/testutil/controlplane"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/turnlogtest"
)

// childTurns go on from the sample's aborted turn 3 (seq 16) in a fork's
// child: an answer carrying another library's replay state, which replay
// degrades, then a turn stopped while it streamed.
const childTurns = `{"seq":17,"type":"turn/start","turn":4,"time":"2026-12-01T11:00:17.000Z"}
{"seq":18,"type":"user/message","turn":4,"time":"2026-12-01T11:00:18.000Z","content":[{"type":"text","text":"Only the first step, briefly."}]}
{"seq":19,"type":"response/start","turn":4,"response":0,"adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}}
{"seq":20,"type":"chunk","turn":4,"response":0,"block":0,"delta":{"type":"text","text":"Check that the registry answers from inside the cluster: run a pod with curl against its health endpoint and read the status code."}}
{"seq":21,"type":"response/finish","turn":4,"response":0,"stopReason":"stop","replayState":{"kind":"other-library","version":1,"response":{}}}
{"seq":22,"type":"turn/end","turn":4,"reason":"stop"}
{"seq":23,"type":"turn/start","turn":5}
{"seq":24,"type":"user/message","turn":5,"content":"And the second step?"}
{"seq":25,"type":"response/start","turn":5,"response":0}
{"seq":26,"type":"chunk","turn":5,"response":0,"block":0,"delta":{"type":"text","text":"Then re-run the pipe"}}
{"seq":27,"type":"turn/end","turn":5,"reason":"aborted"}
`

// What `kubectl turnlog diff support-chat support-chat-retry` prints
// for the sample and its child forked at 15.1, 120 columns wide and 60.
const (
	diffWide = `shared: seq 0-16, turns 1-3, 5 messages; cut at seq 16 (turn 3, aborted)

A: team-a/support-chat                                     │ B: team-a/support-chat-retry
head 22, replayed through 22                               │ head 27, replayed through 27
───────────────────────────────────────────────────────────┼───────────────────────────────────────────────────────────
turn 4, seq 17-22, stop                                    │ turn 4, seq 17-22, stop
  user: Stop. Just the first step, please.                 │   user: Only the first step, briefly.
  assistant [native]: First, check whether the registry is │   assistant [foreign, degraded: kind]: Check that the
    reachable from the cluster.                            │     registry answers from inside the cluster: run a pod
                                                           │     with curl against its health endpoint and read the
                                                           │     status code.
                                                           │
                                                           │ turn 5, seq 23-27, aborted
                                                           │   user: And the second step?
                                                           │   frozen [stopped]: Then re-run the pipe
`
	diffNarrow = `shared: seq 0-16, turns 1-3, 5 messages; cut at seq 16 (turn 3, aborted)

=== A: team-a/support-chat (head 22, replayed through 22) ===
turn 4, seq 17-22, stop
  user: Stop. Just the first step, please.
  assistant [native]: First, check whether the registry is
    reachable from the cluster.

=== B: team-a/support-chat-retry (head 27, replayed through 27) ===
turn 4, seq 17-22, stop
  user: Only the first step, briefly.
  assistant [foreign, degraded: kind]: Check that the
    registry answers from inside the cluster: run a pod with
    curl against its health endpoint and read the status
    code.

turn 5, seq 23-27, aborted
  user: And the second step?
  frozen [stopped]: Then re-run the pipe
`
)

// TestDiffWithTheControllers runs `kubectl turnlog diff` through the real
// kubectl, which finds the plugin on PATH, against an API server with
// turnlog's controllers: the sample Session, its child forked by the
// SessionFork controller at the stopped turn and continued, each replayed
// by the workers. The output is the collapsed prefix and the two
// branches, side by side or one after the other. The errors a user meets
// are one line each.
func TestDiffWithTheControllers(t *testing.T) {
	controlplane.SkipIfMissing(t)
	kubectl := filepath.Join(controlplane.Assets(), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("no kubectl beside the control plane: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	tl := turnlogtest.Start(t, turnlogtest.WithControlPlane(controlplane.Assets()), turnlogtest.WithNamespaces("team-a"),
		turnlogtest.WithPollInterval(200*time.Millisecond))
	st, err := agenthost.OpenStore(ctx, tl.StoreURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sample, err := os.ReadFile("../../config/samples/support-chat.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	importLog(ctx, t, st, tl.Client, "team-a", "support-chat", sample)
	waitReplayed(ctx, t, tl.Client, "support-chat", 22)
	child, cut, err := st.Fork(ctx, tl.Client, "team-a", "support-chat", "15.1", "support-chat-retry")
	if err != nil || cut != 16 {
		t.Fatalf("fork at 15.1: cut %d, %v; want cut 16", cut, err)
	}
	if _, _, err := child.AppendFrom(ctx, strings.NewReader(childTurns)); err != nil {
		t.Fatal(err)
	}
	waitReplayed(ctx, t, tl.Client, "support-chat-retry", 27)

	plugin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(plugin, "kubectl-turnlog"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kubectlTurnlog := func(args ...string) (string, string, int) {
		cmd := exec.CommandContext(ctx, kubectl, append(append([]string{"turnlog"}, args...), "--kubeconfig", tl.Kubeconfig, "-n", "team-a")...)
		cmd.Env = append(os.Environ(), "PATH="+plugin+string(os.PathListSeparator)+os.Getenv("PATH"), "TURNLOG_STORE_URL="+tl.StoreURL)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if exit, ok := errors.AsType[*exec.ExitError](err); ok {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"diff", "support-chat", "support-chat-retry", "--width", "120"}, diffWide},
		{[]string{"diff", "team-a/support-chat", "support-chat-retry", "--width", "60"}, diffNarrow},
	} {
		out, errOut, code := kubectlTurnlog(tc.args...)
		if code != 0 || out != tc.want {
			t.Errorf("kubectl turnlog %s: exit %d, stderr %q, stdout\n%s\nwant\n%s", strings.Join(tc.args, " "), code, errOut, out, tc.want)
		}
	}

	// Sessions the controllers leave alone (they watch team-a only): one
	// never replayed, one whose log the store holds damaged.
	if err := tl.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	importLog(ctx, t, st, tl.Client, "elsewhere", "unreplayed", append(append([]byte{}, sample...), childTurns[strings.Index(childTurns, `{"seq":23`):]...))
	importLog(ctx, t, st, tl.Client, "elsewhere", "damaged", sample)
	damageLog(t, strings.TrimPrefix(tl.StoreURL, "file://"), "elsewhere", "damaged")
	importLog(ctx, t, st, tl.Client, "team-a", "generated", loggen.Log(50, 1))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"diff", "support-chat", "nope"}, `kubectl turnlog diff: Session team-a/nope: sessions.turnlog.dev "nope" not found`},
		{[]string{"diff", "support-chat", "generated"}, "kubectl turnlog diff: team-a/support-chat and team-a/generated share no prefix of whole turns: their logs differ from seq 0 on"},
		{[]string{"diff", "elsewhere/unreplayed", "support-chat"}, "kubectl turnlog diff: elsewhere/unreplayed has no stored transcript yet: not replayed yet: no turn of the log has been replayed for this target"},
		{[]string{"diff", "support-chat", "elsewhere/damaged"}, "kubectl turnlog diff: read the log of elsewhere/damaged: "},
	} {
		out, errOut, code := kubectlTurnlog(tc.args...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("kubectl turnlog %s: exit %d, stdout %q, stderr %q; want exit 1 and one line %q", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
}

// importLog imports lines (JSON Lines, as turnlog export writes them) as
// Session namespace/name.
func importLog(ctx context.Context, t *testing.T, st *agenthost.Store, kube client.Client, namespace, name string, lines []byte) {
	t.Helper()
	events, err := agenthost.ReadEvents(bytes.NewReader(lines), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ImportSession(ctx, kube, namespace, name, events, nil); err != nil {
		t.Fatal(err)
	}
}

// waitReplayed waits until Session team-a/name is Ready and replayed
// through seq.
func waitReplayed(ctx context.Context, t *testing.T, kube client.Client, name string, seq int64) {
	t.Helper()
	s := &turnlogv1.Session{}
	for {
		err := kube.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: name}, s)
		if err == nil && meta.IsStatusConditionTrue(s.Status.Conditions, turnlogv1.ConditionReady) &&
			s.Status.Replay != nil && s.Status.Replay.ThroughSeq >= seq {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Session team-a/%s not Ready and replayed through %d: %v %+v", name, seq, err, s.Status)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// damageLog overwrites the first segment of Session namespace/name's log
// in the file:// store at dir with bytes that are not events.
func damageLog(t *testing.T, dir, namespace, name string) {
	t.Helper()
	var segment string
	err := filepath.WalkDir(filepath.Join(dir, namespace, name), func(path string, d fs.DirEntry, err error) error {
		if err == nil && segment == "" && filepath.Base(filepath.Dir(path)) == "log" && strings.HasSuffix(path, ".jsonl") {
			segment = path
		}
		return err
	})
	if err != nil || segment == "" {
		t.Fatalf("no segment of %s/%s under %s: %v", namespace, name, dir, err)
	}
	if err := os.WriteFile(segment, []byte("not an event\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The marks of every kind of entry, turns open, not replayed or between
// turns, text that needs cleaning or cutting, a branch with nothing after
// the cut: each as a reader sees it.
func TestDiffFormat(t *testing.T) {
	long := strings.Repeat("word ", 40)
	c := compare.Comparison{
		Shared: compare.Shared{CutSeq: 12, Turns: 1, FirstTurn: 2, LastTurn: 2, LastTurnEndSeq: 10, LastReason: "toolUse", Messages: 1, SameThroughSeq: 12},
		A: compare.Side{Name: "team-a/chat", HeadSeq: 30, ThroughSeq: 20, Turns: []compare.Turn{
			{Turn: 0, StartSeq: 13, EndSeq: 13, Replayed: true, Entries: []compare.Entry{
				{Kind: compare.KindMessage, Seq: 13, Role: "user", Origin: "compaction", Text: "Summary:\n\tthe deploy\x1b[31m failed"}}},
			{Turn: 3, StartSeq: 14, EndSeq: 20, Reason: "stop", Replayed: true, Entries: []compare.Entry{
				{Kind: compare.KindMessage, Seq: 16, Role: "assistant", Replay: "native", Refused: []string{"r1", "r2"}, DroppedBlocks: []int{0}, Text: "→ grep {}"},
				{Kind: compare.KindMessage, Seq: 16, Role: "toolResult", ToolName: "grep", Synthetic: true, Text: "No result provided"},
				{Kind: compare.KindFrozen, Seq: 18, StopReason: "error", Text: ""}}},
			{Turn: 4, StartSeq: 21, EndSeq: 25, Reason: "stop", Entries: []compare.Entry{
				{Kind: compare.KindFrozen, Seq: 24, Text: long + strings.Repeat("x", 70)}}},
			{Turn: 5, StartSeq: 26, EndSeq: -1},
		}},
		B: compare.Side{Name: "team-a/chat-child", HeadSeq: 12, ThroughSeq: -1, Turns: []compare.Turn{}},
	}
	want := `shared: seq 0-12, turn 2, 1 message; cut at seq 12 (after turn 2)

=== A: team-a/chat (head 30, replayed through 20) ===
between turns, seq 13-13
  user [compaction]: Summary: the deploy[31m failed

turn 3, seq 14-20, stop
  assistant [native, 2 refused blocks, 1 dropped block]: →
    grep {}
  toolResult grep [synthetic]: No result provided
  frozen [error]: -

turn 4, seq 21-25, stop, not replayed yet
  frozen [stopped]: word word word word word word word word
    word word word word word word word word word word word
    word word word word word word word word word word word
    word word word word word word word word word word…

turn 5, seq 26-, open

=== B: team-a/chat-child (head 12) ===
(nothing after seq 12: its log ends there)
`
	if got := formatDiff(c, 60); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	// Side by side, each turn beside the other branch's turn of the same
	// number, a turn or a stretch between turns of one branch beside
	// nothing; a branch that ends at the cut says so at the top.
	user := func(seq int64, text string) []compare.Entry {
		return []compare.Entry{{Kind: compare.KindMessage, Seq: seq, Role: "user", Text: text}}
	}
	c.A.Turns = []compare.Turn{c.A.Turns[0], {Turn: 3, StartSeq: 14, EndSeq: 20, Reason: "stop", Replayed: true, Entries: user(15, "three")},
		{Turn: 4, StartSeq: 21, EndSeq: 25, Reason: "stop", Replayed: true, Entries: user(22, "four")}}
	c.B = compare.Side{Name: "team-a/chat-child", HeadSeq: 40, ThroughSeq: 40, Turns: []compare.Turn{
		{Turn: 3, StartSeq: 13, EndSeq: 30, Reason: "toolUse", Replayed: true, Entries: user(14, "three, again")},
		{Turn: 5, StartSeq: 31, EndSeq: 40, Reason: "stop", Replayed: true, Entries: user(32, "five")}}}
	want = `shared: seq 0-12, turn 2, 1 message; cut at seq 12 (after turn 2)

A: team-a/chat                              │ B: team-a/chat-child
head 30, replayed through 20                │ head 40, replayed through 40
────────────────────────────────────────────┼────────────────────────────────────────────
between turns, seq 13-13                    │
  user [compaction]: Summary: the           │
    deploy[31m failed                       │
                                            │
turn 3, seq 14-20, stop                     │ turn 3, seq 13-30, toolUse
  user: three                               │   user: three, again
                                            │
turn 4, seq 21-25, stop                     │
  user: four                                │
                                            │
                                            │ turn 5, seq 31-40, stop
                                            │   user: five
`
	if got := formatDiff(c, 89); got != want {
		t.Errorf("side by side: got\n%s\nwant\n%s", got, want)
	}
	c.A, c.B = c.B, compare.Side{Name: "team-a/chat-copy", HeadSeq: 12, ThroughSeq: -1, Turns: []compare.Turn{}}
	if got := formatDiff(c, 89); !strings.Contains(got, "\nturn 3, seq 13-30, toolUse                  │ (nothing after seq 12: its log ends there)\n") {
		t.Errorf("a branch ending at the cut, side by side:\n%s", got)
	}

	c.Identical, c.Shared.CutSeq, c.Shared.LastTurnEndSeq = true, 10, 10
	if got, want := formatDiff(c, 60), "shared: seq 0-10, turn 2, 1 message: the two logs are the same\n"; got != want {
		t.Errorf("identical logs: got %q, want %q", got, want)
	}
}
