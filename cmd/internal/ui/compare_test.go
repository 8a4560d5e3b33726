package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/compare"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/worker"
)

// testCluster is Sessions in a fake API server, their logs in an
// in-memory store, and a Server over both that reads what it reads.
type testCluster struct {
	t     *testing.T
	kube  client.WithWatch
	logs  *sessionlog.Store
	reads *readKeys
	srv   *Server
}

// newTestCluster holds objects (each Session with a uid of its own)
// behind the interceptors given.
func newTestCluster(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) *testCluster {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := turnlogv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if s, ok := o.(*turnlogv1.Session); ok {
			s.UID = types.UID("uid-" + s.Namespace + "-" + s.Name)
		}
	}
	kube := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(), funcs)
	b, err := store.Open(t.Context(), "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	reads := &readKeys{Bucket: b}
	st := agenthost.StoreOnBucket(reads, nil)
	t.Cleanup(func() { st.Close() })
	tcp, _ := net.ResolveTCPAddr("tcp", addr)
	srv, err := newServer(Options{Kube: kube, Namespace: "default", Store: st}, tcp)
	if err != nil {
		t.Fatal(err)
	}
	return &testCluster{t: t, kube: kube, logs: sessionlog.New(reads), reads: reads, srv: srv}
}

func session(ns, name string) *turnlogv1.Session {
	return &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// log is the raw log of Session ns/name, as the workers read it.
func (c *testCluster) log(ns, name string) *sessionlog.Log {
	c.t.Helper()
	l, err := c.logs.Log(sessionlog.Location{Namespace: ns, Session: name, UID: "uid-" + ns + "-" + name})
	if err != nil {
		c.t.Fatal(err)
	}
	return l
}

// seqField is the seq a line of `turnlog export` starts with.
var seqField = regexp.MustCompile(`^\{"seq":\d+,`)

// write appends JSON Lines (with seqs or without) to a Session's log, as
// a host does: the log assigns the seqs.
func (c *testCluster) write(ns, name string, lines []byte) {
	c.t.Helper()
	var events [][]byte
	for line := range bytes.Lines(lines) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			events = append(events, seqField.ReplaceAll(line, []byte("{")))
		}
	}
	if _, err := c.log(ns, name).NewAppender("").Append(c.t.Context(), events...); err != nil {
		c.t.Fatalf("write %s/%s: %v", ns, name, err)
	}
}

// fork copies the source's events 0..cut to the child, as the fork
// controller does.
func (c *testCluster) fork(ns, source, child string, cut int64) {
	c.t.Helper()
	loc := func(name string) sessionlog.Location {
		return sessionlog.Location{Namespace: ns, Session: name, UID: "uid-" + ns + "-" + name}
	}
	if err := c.logs.CopyPrefix(c.t.Context(), loc(source), loc(child), cut); err != nil {
		c.t.Fatal(err)
	}
}

// replay stores a Session's transcript, as the workers do.
func (c *testCluster) replay(ns, name string) {
	c.t.Helper()
	if _, err := worker.Replay(c.t.Context(), derived.StoreLog{Log: c.log(ns, name)}, turnlog.Adapter{}); err != nil {
		c.t.Fatal(err)
	}
}

// get answers a GET of the page's API: its status and its body.
func (c *testCluster) get(path string) (int, []byte) {
	w := serve(c.srv, http.MethodGet, path, addr, "", nil)
	return w.Code, w.Body.Bytes()
}

func readSample(t *testing.T) []byte {
	data, err := os.ReadFile("../../../config/samples/support-chat.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A turn of the sample's child after the cut at its stopped turn (16).
const childTurn = `{"type":"turn/start","turn":4}
{"type":"user/message","turn":4,"content":"Only the first step, briefly."}
{"type":"assistant/message","turn":4,"response":0,"message":{"content":[{"type":"text","text":"Check the registry."}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop"}}
{"type":"turn/end","turn":4,"reason":"stop"}
`

// describeRows is the rows of a comparison as a reader sees them: each
// turn's number and the text of each side's entries.
func describeRows(rows []compareRow) []string {
	side := func(t *compare.Turn) string {
		if t == nil {
			return "-"
		}
		var texts []string
		for _, e := range t.Entries {
			texts = append(texts, e.Kind+":"+e.Text)
		}
		return strings.Join(texts, " / ")
	}
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("turn %d | %s | %s", r.Turn, side(r.A), side(r.B)))
	}
	return out
}

// The comparison of a Session and its fork's child: the prefix they
// share, cut at 16, then each one's turn 4 in one row, in the order of
// the link; the other order swaps the sides.
func TestCompareParentAndChild(t *testing.T) {
	c := newTestCluster(t, interceptor.Funcs{}, session("default", "chat"), session("default", "chat-retry"))
	c.write("default", "chat", readSample(t))
	c.fork("default", "chat", "chat-retry", 16)
	c.write("default", "chat-retry", []byte(childTurn))
	c.replay("default", "chat")
	c.replay("default", "chat-retry")
	for _, order := range []struct{ path, left, right string }{
		{"/api/compare/default/chat/default/chat-retry", "message:Stop. Just the first step, please. / message:First, check whether the registry is reachable from the cluster.",
			"message:Only the first step, briefly. / message:Check the registry."},
		{"/api/compare/default/chat-retry/default/chat", "message:Only the first step, briefly. / message:Check the registry.",
			"message:Stop. Just the first step, please. / message:First, check whether the registry is reachable from the cluster."},
	} {
		code, body := c.get(order.path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", order.path, code, body)
		}
		var v comparisonView
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		if s := v.Shared; s.CutSeq != 16 || s.Turns != 3 || s.Messages != 5 || s.LastReason != "aborted" {
			t.Errorf("%s: shared %+v, want turns 1-3, 5 messages, cut at 16 after an aborted turn", order.path, s)
		}
		want := "turn 4 | " + order.left + " | " + order.right
		if got := describeRows(v.Rows); len(got) != 1 || got[0] != want {
			t.Errorf("%s: rows\n%q\nwant\n%q", order.path, got, want)
		}
	}
}

// Two forks of one Session cut at different turns: the prefix is the
// earlier cut's, and a turn only one of them has stands beside nothing.
func TestCompareSiblings(t *testing.T) {
	c := newTestCluster(t, interceptor.Funcs{}, session("default", "chat"), session("default", "early"), session("default", "late"))
	c.write("default", "chat", readSample(t))
	c.fork("default", "chat", "early", 11)
	c.fork("default", "chat", "late", 16)
	c.write("default", "early", []byte(strings.ReplaceAll(strings.ReplaceAll(childTurn, `"turn":4`, `"turn":3`), "Only the first step", "Roll back")))
	c.write("default", "late", []byte(childTurn))
	c.replay("default", "early")
	c.replay("default", "late")
	code, body := c.get("/api/compare/default/early/default/late")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	var v comparisonView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	if v.Shared.CutSeq != 11 || v.Shared.LastTurn != 2 || v.A.Name != "early" || v.B.Name != "late" || v.B.HeadSeq != 20 {
		t.Errorf("shared %+v, sides %+v %+v: want the cut at 11 (turn 2), A early, B late with head 20", v.Shared, v.A, v.B)
	}
	got := describeRows(v.Rows)
	want := []string{
		"turn 3 | message:Roll back, briefly. / message:Check the registry. | message:Write the full runbook for this. / frozen:Runbook: 1. Check the registry status page",
		"turn 4 | - | message:Only the first step, briefly. / message:Check the registry.",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// What cannot be compared says why, in one line: a Session that is not
// there, one the workers have not replayed, two that share no turn, no
// store to read the logs from.
func TestCompareSaysWhyNot(t *testing.T) {
	c := newTestCluster(t, interceptor.Funcs{}, session("default", "chat"), session("default", "chat-retry"), session("default", "other"))
	c.write("default", "chat", readSample(t))
	c.replay("default", "chat")
	c.fork("default", "chat", "chat-retry", 16)
	c.write("default", "chat-retry", []byte(childTurn))
	c.write("default", "other", []byte(strings.ReplaceAll(childTurn, `"turn":4`, `"turn":1`)))
	c.replay("default", "other")
	for _, want := range []struct {
		path, words string
		code        int
	}{
		{"/api/compare/default/chat/team-b/nope", `"Session team-b/nope not found"`, http.StatusNotFound},
		{"/api/compare/default/chat/default/chat-retry", "not replayed yet: default/chat-retry has no stored transcript yet", http.StatusConflict},
		{"/api/compare/default/chat/default/other", "default/chat and default/other share no prefix of whole turns: their logs differ from seq 0 on — compare two Sessions of one fork tree", http.StatusUnprocessableEntity},
	} {
		code, body := c.get(want.path)
		if code != want.code || !strings.Contains(string(body), want.words) || bytes.Count(body, []byte("\n")) != 1 {
			t.Errorf("%s: %d %s, want %d saying %s", want.path, code, body, want.code, want.words)
		}
	}
	c.srv.opts.Store = nil
	if code, body := c.get("/api/compare/default/chat/default/chat-retry"); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "--store-url") {
		t.Errorf("without a store: %d %s, want 503 naming --store-url", code, body)
	}
}

// A comparison sends the first maxCompareRows rows and counts the rest.
func TestComparisonRowsAreBounded(t *testing.T) {
	var c compare.Comparison
	for n := range maxCompareRows + 30 {
		c.A.Turns = append(c.A.Turns, compare.Turn{Turn: int64(n + 1)})
	}
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	v := viewComparison(c, r)
	if len(v.Rows) != maxCompareRows || v.MoreRows != 30 || v.Rows[0].B != nil || v.Rows[0].Turn != 1 {
		t.Errorf("%d rows, %d more, first %+v: want %d rows and 30 more", len(v.Rows), v.MoreRows, v.Rows[0], maxCompareRows)
	}
}

// A child whose spec.forkedFrom names its source is compared from the
// fork point: the answer is the one the page gets without the record, and
// the child's log is read from the cut, not from seq 0. The source is
// written a turn a segment and the child refers to its segments, as a
// fork by reference does, so the segments read say where each log was read.
func TestCompareByLineage(t *testing.T) {
	child := session("default", "chat-retry")
	child.Spec.ForkedFrom = &turnlogv1.ForkOrigin{Session: "chat", UID: "uid-default-chat", CutSeq: 16}
	hide := false
	hideLineage := interceptor.Funcs{Get: func(ctx context.Context, kube client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		err := kube.Get(ctx, key, obj, opts...)
		if s, ok := obj.(*turnlogv1.Session); ok && hide {
			s.Spec.ForkedFrom = nil
		}
		return err
	}}
	c := newTestCluster(t, hideLineage, session("default", "chat"), child)
	lines := bytes.SplitAfter(readSample(t), []byte("\n"))
	for _, seqs := range [][2]int{{0, 5}, {5, 12}, {12, 17}, {17, 23}} {
		c.write("default", "chat", bytes.Join(lines[seqs[0]:seqs[1]], nil))
	}
	loc := func(name string) sessionlog.Location {
		return sessionlog.Location{Namespace: "default", Session: name, UID: "uid-default-" + name}
	}
	if _, err := c.logs.Fork(t.Context(), loc("chat"), loc("chat-retry"), 16, nil); err != nil {
		t.Fatal(err)
	}
	c.write("default", "chat-retry", []byte(childTurn))
	c.replay("default", "chat")
	c.replay("default", "chat-retry")

	const path = "/api/compare/default/chat/default/chat-retry"
	answers := map[bool][]byte{}
	segments := map[bool]int{}
	for _, lineage := range []bool{true, false} {
		hide = !lineage
		c.reads.segments()
		code, body := c.get(path)
		if code != http.StatusOK {
			t.Fatalf("lineage %v: %d %s", lineage, code, body)
		}
		answers[lineage] = body
		segments[lineage], _ = c.reads.segments()
	}
	if !bytes.Equal(answers[true], answers[false]) {
		t.Errorf("by lineage\n%s\nfrom seq 0\n%s", answers[true], answers[false])
	}
	// From seq 0, the prefix reads the source's four segments and the
	// child's three referred to and its own; then each side is read from
	// the cut: a segment each. By lineage, the child's prefix is read
	// from the cut only: the segment holding seq 16, and its own.
	if segments[true] != 8 || segments[false] != 10 {
		t.Errorf("segments read: %d by lineage, %d from seq 0; want 8 and 10", segments[true], segments[false])
	}
}
