package main

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

func TestSessionsTable(t *testing.T) {
	ready := metav1.Condition{Type: turnlogv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Current"}
	failing := metav1.Condition{Type: turnlogv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "WorkerFailed"}
	sessions := []turnlogv1.Session{
		{ObjectMeta: metav1.ObjectMeta{Name: "support-chat", Namespace: "team-a"}, Status: turnlogv1.SessionStatus{
			HeadSeq: ptr.To[int64](22), Turns: 4, Conditions: []metav1.Condition{ready},
			Replay: &turnlogv1.ReplaySummary{ThroughSeq: 22, Degraded: 1, ContextMessages: 7,
				DegradedSeqs: turnlogv1.DegradedSeqs{Version: []int64{3}}},
		}},
		// More degraded messages than status lists: the rest are counted.
		{ObjectMeta: metav1.ObjectMeta{Name: "switched", Namespace: "team-b"}, Status: turnlogv1.SessionStatus{
			HeadSeq: ptr.To[int64](90), Turns: 9, Conditions: []metav1.Condition{failing},
			Replay: &turnlogv1.ReplaySummary{ThroughSeq: 80, Degraded: 25, ContextMessages: 31,
				DegradedSeqs: turnlogv1.DegradedSeqs{Kind: []int64{7, 15}, Shape: []int64{40}}},
		}},
		// Created, nothing written or replayed yet.
		{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "team-b"}},
		// Blocks the provider refused after a compaction, kept as pi keeps
		// them, and a child that drops them.
		{ObjectMeta: metav1.ObjectMeta{Name: "compacted", Namespace: "team-c"}, Status: turnlogv1.SessionStatus{
			HeadSeq: ptr.To[int64](40), Turns: 5, Conditions: []metav1.Condition{ready},
			Replay: &turnlogv1.ReplaySummary{ThroughSeq: 40, ContextMessages: 9,
				Refused:     turnlogv1.RefusedCounts{PrefixBindingMismatch: 2, ModelBindingMismatch: 1, Unmapped: 1},
				RefusedSeqs: turnlogv1.RefusedSeqs{PrefixBindingMismatch: []int64{7, 3}, ModelBindingMismatch: []int64{7}}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "compacted-child", Namespace: "team-c"}, Status: turnlogv1.SessionStatus{
			HeadSeq: ptr.To[int64](36), Turns: 4, Conditions: []metav1.Condition{ready},
			Replay: &turnlogv1.ReplaySummary{ThroughSeq: 36, ContextMessages: 9, Adapter: turnlogv1.Adapter{RefusedBlocks: agenthost.RefusedBlocksDrop},
				Refused:     turnlogv1.RefusedCounts{PrefixBindingMismatch: 2, Dropped: 2},
				RefusedSeqs: turnlogv1.RefusedSeqs{PrefixBindingMismatch: []int64{3, 7}}},
		}},
	}
	var out strings.Builder
	if err := printSessions(&out, sessions, true); err != nil {
		t.Fatal(err)
	}
	want := `NAMESPACE   NAME              READY                  HEAD   TURNS   CONTEXT   DEGRADED   CAUSES                          REFUSED
team-a      support-chat      True                   22     4       7         1          version:3                       -
team-b      switched          False (WorkerFailed)   90     9       31        25         kind:7,15 shape:40 (+22 more)   -
team-b      new               Unknown                -      0       -         -          -                               -
team-c      compacted         True                   40     5       9         0          -                               3 kept (3,7), 1 unmapped
team-c      compacted-child   True                   36     4       9         0          -                               2 dropped (3,7)
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestForkPointsTable(t *testing.T) {
	turns := []agenthost.Turn{
		{Turn: 1, StartSeq: 1, CutSeq: 4, Reason: "stop", UserText: "Our nightly deploy failed. What happened?"},
		{Turn: 2, StartSeq: 5, CutSeq: 11, Reason: "toolUse", UserText: "Check\nthe   registry, the pull secret, the node's disk and the image digest please"},
		{Turn: 3, StartSeq: 12, CutSeq: 16, Reason: "aborted"},
		{Turn: 4, StartSeq: 17, CutSeq: 22, Reason: "stop", UserText: "Stop."},
		{Turn: 5, StartSeq: 23, CutSeq: -1, UserText: "And now?"},
	}
	found := problems{degraded: map[int64]string{3: "version", 8: "kind", 9: "shape", 10: "kind"},
		// Seq 3's thinking refused in turn 2's request, seq 8's in turn 3's.
		refused: []refusal{{seq: 3, reportedAt: 10}, {seq: 8, reportedAt: 15}},
		// Replayed through seq 16: turn 4 has ended but is not replayed yet.
		through: 16}
	var out strings.Builder
	if err := printForkPoints(&out, turns, found); err != nil {
		t.Fatal(err)
	}
	want := `CUT   TURN   END       DEGRADED            REFUSED   USER
4     1      stop      yes (version)       no        Our nightly deploy failed. What happened?
11    2      toolUse   yes (kind, shape)   1 kept    Check the registry, the pull secret, the node's…
16    3      aborted   no                  2 kept    -
22    4      stop      pending             pending   Stop.
-     5      open      pending             pending   And now?

A child cut where REFUSED is not "no" sends thinking blocks the provider already refused, as pi does;
fork --refused-blocks=Drop leaves them out of its transcript.
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	// A Session that drops them says so, without the advice.
	found.dropped = true
	out.Reset()
	if err := printForkPoints(&out, turns[:3], found); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "2 dropped") || strings.Contains(got, "--refused-blocks") {
		t.Errorf("a Session dropping refused blocks:\n%s", got)
	}
}

func TestFirstWordsCutsLongWords(t *testing.T) {
	long := strings.Repeat("ab", 40)
	if got, want := firstWords(long, 8, 60), strings.Repeat("ab", 30)+"…"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := firstWords("héllo wörld", 8, 7); got != "héllo w…" {
		t.Errorf("runes: got %q", got)
	}
}

func TestEventsTable(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	events := []corev1.Event{
		{InvolvedObject: corev1.ObjectReference{Kind: "Session", Name: "chat"}, Type: "Warning", Reason: "ReplayDegraded",
			Message: "seq 3 replayed provider-neutral\nfor pi-ai: cause version", EventTime: metav1.NewMicroTime(now.Add(-90 * time.Second))},
		{InvolvedObject: corev1.ObjectReference{Kind: "SessionFork", Name: "chat-retry"}, Type: "Normal", Reason: "Forked",
			Message: "child chat-retry", Series: &corev1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(now.Add(-5 * time.Second))}},
	}
	var out strings.Builder
	if err := printEvents(&out, events, now); err != nil {
		t.Fatal(err)
	}
	want := `LAST SEEN   TYPE      REASON           OBJECT                   MESSAGE
90s         Warning   ReplayDegraded   session/chat             seq 3 replayed provider-neutral for pi-ai: cause version
5s          Normal    Forked           sessionfork/chat-retry   child chat-retry
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

// A command line the plugin cannot run exits 2 with one line saying why
// (and where to read the usage); no cluster is contacted.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"fork", "chat"}, "kubectl turnlog fork: --at is required: the seq to fork at, e.g. 41 or 40.1 (see fork-points)"},
		{[]string{"fork", "chat", "--at", "4", "--refused-blocks", "drop"}, `kubectl turnlog fork: --refused-blocks "drop": want Keep or Drop`},
		{[]string{"fork-points"}, "kubectl turnlog fork-points: want one SESSION (the name of a Session), got 0 arguments"},
		{[]string{"transcript", "a", "b"}, "kubectl turnlog transcript: want one SESSION (the name of a Session), got 2 arguments"},
		{[]string{"sessions", "chat"}, `kubectl turnlog sessions: takes no arguments, got ["chat"]`},
		{[]string{"sessions", "--bogus"}, "kubectl turnlog sessions: unknown flag: --bogus"},
		{[]string{"sesions"}, `kubectl turnlog: unknown command "sesions"`},
		{[]string{"diff", "chat"}, "kubectl turnlog diff: want two Sessions to compare, A and B (NAME or NAMESPACE/NAME), got 1 arguments"},
		{[]string{"diff", "team-a/chat/x", "chat-retry"}, `kubectl turnlog diff: Session "team-a/chat/x": want NAME or NAMESPACE/NAME`},
		{[]string{"diff", "chat", "/chat-retry"}, `kubectl turnlog diff: Session "/chat-retry": want NAME or NAMESPACE/NAME`},
		{[]string{"diff", "chat", "chat-retry", "--width", "-1"}, "kubectl turnlog diff: --width -1: want 0 (the terminal's) or a number of columns"},
	} {
		var stdout, stderr strings.Builder
		code := run(context.Background(), tc.args, &stdout, &stderr)
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if code != 2 || lines[0] != tc.want || len(lines) != 2 || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want exit 2 and %q", tc.args, code, stderr.String(), stdout.String(), tc.want)
		}
	}
}

// The commands that read the store check its flags before they contact
// the cluster, and say how to give them.
func TestStoreFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"log", "chat", "--store-url", ""}, "kubectl turnlog log: --store-url (or $TURNLOG_STORE_URL) is required"},
		{[]string{"fork-points", "chat", "--store-url", "ftp://host/x"}, "kubectl turnlog fork-points: --store-url: "},
		{[]string{"diff", "chat", "chat-retry", "--store-url", ""}, "kubectl turnlog diff: --store-url (or $TURNLOG_STORE_URL) is required"},
	} {
		t.Setenv("TURNLOG_STORE_URL", "")
		var stdout, stderr strings.Builder
		code := run(context.Background(), append(tc.args, "--kubeconfig", "/nonexistent"), &stdout, &stderr)
		if code != 2 || !strings.HasPrefix(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q...", tc.args, code, stderr.String(), tc.want)
		}
	}
}
