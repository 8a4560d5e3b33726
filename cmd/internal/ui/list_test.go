package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
)

// sse is one Server-Sent Event.
type sse struct {
	name string
	data string
}

// eventReader reads a stream of the Sessions list.
type eventReader struct {
	t  *testing.T
	sc *bufio.Scanner
}

// openStream opens the Sessions stream with query, over HTTP, as the
// page's EventSource does; it is closed when the test ends.
func (c *testCluster) openStream(query string) *eventReader {
	c.t.Helper()
	srv := httptest.NewServer(c.srv.Handler())
	ctx, cancel := context.WithTimeout(c.t.Context(), 20*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/sessions/watch?"+query, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Host = addr
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		cancel()
		res.Body.Close()
		srv.Close()
	})
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<22)
	return &eventReader{t: c.t, sc: sc}
}

// until reads events until one named name, or "invalid", and returns
// them.
func (r *eventReader) until(name string) []sse {
	r.t.Helper()
	var out []sse
	var ev sse
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		case line == "" && ev.name != "":
			out = append(out, ev)
			if ev.name == name || ev.name == "invalid" {
				return out
			}
			ev = sse{}
		}
	}
	r.t.Fatalf("the stream ended before a %q event (%v): %+v", name, r.sc.Err(), out)
	return nil
}

// last decodes the last event named name into v.
func last(t *testing.T, events []sse, name string, v any) {
	t.Helper()
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].name == name {
			if err := json.Unmarshal([]byte(events[i].data), v); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no %q event in %+v", name, events)
}

// names are the views' namespace/name.
func names(views []sessionView) []string {
	out := []string{}
	for _, v := range views {
		out = append(out, v.Namespace+"/"+v.Name)
	}
	return out
}

// denied refuses lists of Sessions across namespaces and in the
// namespaces given, and, unless namespaces, lists of namespaces, as an
// API server refuses a user with a Role in some namespaces.
func denied(namespaces bool, sessionsIn ...string) interceptor.Funcs {
	return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		o := (&client.ListOptions{}).ApplyOptions(opts)
		where := "at the cluster scope"
		if o.Namespace != "" {
			where = fmt.Sprintf("in the namespace %q", o.Namespace)
		}
		switch list.(type) {
		case *turnlogv1.SessionList:
			if o.Namespace == "" || slices.Contains(sessionsIn, o.Namespace) {
				return apierrors.NewForbidden(schema.GroupResource{Group: "turnlog.dev", Resource: "sessions"}, "",
					fmt.Errorf(`User "viewer" cannot list resource "sessions" in API group "turnlog.dev" %s`, where))
			}
		case *corev1.NamespaceList:
			if !namespaces {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "",
					fmt.Errorf(`User "viewer" cannot list resource "namespaces" in API group "" %s`, where))
			}
		}
		return c.List(ctx, list, opts...)
	}}
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// A user who may not list Sessions across namespaces is shown those of
// the namespaces where it may, and told so; one who may not list
// namespaces either, those of turnlog ui's namespace. The list follows
// them live.
func TestListFallsBackToTheNamespacesTheUserMayList(t *testing.T) {
	objects := []client.Object{namespace("default"), namespace("team-a"), namespace("team-b"),
		session("default", "d1"), session("team-a", "a1"), session("team-b", "b1")}
	refusal := `You may not list Sessions across namespaces (sessions.turnlog.dev is forbidden: User "viewer" cannot list resource "sessions" in API group "turnlog.dev" at the cluster scope)`
	for _, c := range []struct {
		name  string
		funcs interceptor.Funcs
		want  listScope
		rows  []string
	}{
		{"every namespace allowed", interceptor.Funcs{}, listScope{All: true}, []string{"default/d1", "team-a/a1", "team-b/b1"}},
		{"some namespaces allowed", denied(true, "team-b"),
			listScope{Namespaces: []string{"default", "team-a"}, Note: refusal + ": showing the namespaces where you may, default, team-a."},
			[]string{"default/d1", "team-a/a1"}},
		{"namespaces not listable", denied(false),
			listScope{Namespaces: []string{"default"}, Note: refusal + " nor namespaces: showing namespace default, turnlog ui's (-n, else your kubeconfig context's)."},
			[]string{"default/d1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newTestCluster(t, c.funcs, objects...)
			stream := cl.openStream("namespace=")
			events := stream.until("snapshot")
			var scope listScope
			var views []sessionView
			last(t, events, "scope", &scope)
			last(t, events, "snapshot", &views)
			if scope.All != c.want.All || !slices.Equal(scope.Namespaces, c.want.Namespaces) || scope.Note != c.want.Note {
				t.Errorf("scope %+v\nwant  %+v", scope, c.want)
			}
			if got := names(views); !slices.Equal(got, c.rows) {
				t.Errorf("rows %q, want %q", got, c.rows)
			}
			if err := cl.kube.Create(t.Context(), session("default", "d2")); err != nil {
				t.Fatal(err)
			}
			var v sessionView
			last(t, stream.until("upsert"), "upsert", &v)
			if v.Name != "d2" {
				t.Errorf("upsert of %s, want the new d2", v.Name)
			}
		})
	}
}

// withStatus gives a Session labels, a Ready condition and replay
// counts.
func withStatus(s *turnlogv1.Session, labels map[string]string, ready metav1.ConditionStatus, degraded, refused int64) *turnlogv1.Session {
	s.Labels = labels
	if ready != "" {
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: turnlogv1.ConditionReady, Status: ready, Reason: "Test"})
	}
	s.Status.Replay = &turnlogv1.ReplaySummary{Degraded: degraded, Refused: turnlogv1.RefusedCounts{Other: refused}}
	return s
}

// Each filter narrows the list to the Sessions it names, and a Session
// that stops matching leaves it; a filter that is not one says why.
func TestListFilters(t *testing.T) {
	cl := newTestCluster(t, interceptor.Funcs{},
		withStatus(session("default", "chat-a"), map[string]string{"team": "a"}, metav1.ConditionTrue, 1, 0),
		withStatus(session("default", "chat-b"), map[string]string{"team": "b"}, metav1.ConditionFalse, 0, 2),
		withStatus(session("default", "build"), nil, "", 0, 0),
		withStatus(session("team-b", "chat-c"), map[string]string{"team": "a"}, metav1.ConditionTrue, 0, 0))
	for query, want := range map[string][]string{
		"name=CHAT":                 {"default/chat-a", "default/chat-b"},
		"label=team%3Da":            {"default/chat-a"},
		"label=team+in+(a,b)":       {"default/chat-a", "default/chat-b"},
		"ready=False":               {"default/chat-b"},
		"ready=Unknown":             {"default/build"},
		"degraded=1":                {"default/chat-a"},
		"refused=1":                 {"default/chat-b"},
		"name=chat&ready=True":      {"default/chat-a"},
		"name=zzz":                  {},
		"label=team%3Da&namespace=": {"default/chat-a", "team-b/chat-c"},
		"degraded=1&refused=1":      {},
		"name=+Chat-+":              {"default/chat-a", "default/chat-b"},
	} {
		q := query
		if !strings.Contains(q, "namespace=") {
			q += "&namespace=default"
		}
		var views []sessionView
		last(t, cl.openStream(q).until("snapshot"), "snapshot", &views)
		if got := names(views); !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", query, got, want)
		}
	}
	for query, want := range map[string]string{
		"ready=maybe":      `ready=\"maybe\": want True, False or Unknown`,
		"label=team%3D%28": `label=\"team=(\": want KEY=VALUE`,
	} {
		events := cl.openStream(query + "&namespace=default").until("snapshot")
		if ev := events[len(events)-1]; ev.name != "invalid" || !strings.Contains(ev.data, want) {
			t.Errorf("%s: %+v, want an invalid event saying %s", query, ev, want)
		}
	}
	stream := cl.openStream("namespace=default&degraded=1")
	stream.until("snapshot")
	chat := &turnlogv1.Session{}
	if err := cl.kube.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "chat-a"}, chat); err != nil {
		t.Fatal(err)
	}
	chat.Status.Replay.Degraded = 0
	if err := cl.kube.Update(t.Context(), chat); err != nil {
		t.Fatal(err)
	}
	var gone map[string]string
	last(t, stream.until("delete"), "delete", &gone)
	if gone["name"] != "chat-a" {
		t.Errorf("deleted %v, want chat-a, no longer degraded", gone)
	}
}

// A text search finds the Sessions whose last user message holds the
// words, looking back past a last turn that has none; it reads at most
// textReads logs per list, says how many it left out, and does not read
// again a Session whose head has not moved.
func TestListTextSearch(t *testing.T) {
	cl := newTestCluster(t, interceptor.Funcs{}, session("default", "s1"), session("default", "s2"), session("default", "s3"))
	cl.write("default", "s1", readSample(t))
	cl.write("default", "s2", []byte(`{"type":"turn/start","turn":1}
{"type":"user/message","turn":1,"content":[{"type":"text","text":"Roll  BACK\nnow"}]}
{"type":"turn/end","turn":1,"reason":"stop"}
{"type":"turn/start","turn":2}
{"type":"context/message","turn":2,"origin":"bash","content":"back up done"}
{"type":"turn/end","turn":2,"reason":"stop"}
`))
	cl.write("default", "s3", loggen.RefusedLog(3))
	cl.srv.textReads = 2
	search := func(text string) ([]sessionView, searchReport) {
		t.Helper()
		events := cl.openStream("namespace=default&text=" + text).until("search")
		var views []sessionView
		var report searchReport
		last(t, events, "snapshot", &views)
		last(t, events, "search", &report)
		return views, report
	}
	views, report := search("roll+back")
	if got := names(views); !slices.Equal(got, []string{"default/s2"}) || views[0].LastUser != "Roll  BACK\nnow" {
		t.Errorf("found %q (%+v), want s2 and its last user message", got, views)
	}
	if report != (searchReport{Searched: 2, Unsearched: 1, MaxReads: 2}) {
		t.Errorf("first search: %+v, want 2 searched, 1 left out", report)
	}
	views, report = search("question")
	if got := names(views); !slices.Equal(got, []string{"default/s3"}) || report != (searchReport{Searched: 3, MaxReads: 2}) {
		t.Errorf("second search: %q, %+v; want s3 found, 3 searched (2 of them remembered)", got, report)
	}
}

// Reading a last user message reads the end of the log, not all of it.
func TestLastUserReadsTheLogsEnd(t *testing.T) {
	long := session("default", "long")
	cl := newTestCluster(t, interceptor.Funcs{}, long)
	var turn []byte
	for line := range strings.Lines(string(loggen.RefusedLog(100))) {
		turn = append(turn, line...)
		if strings.Contains(line, `"turn/end"`) {
			cl.write("default", "long", turn)
			turn = nil
		}
	}
	cl.reads.segments()
	text, err := cl.srv.lastUser(t.Context(), long)
	if err != nil || text != "question 100" {
		t.Fatalf("last user message %q, %v; want question 100", text, err)
	}
	if segments, _ := cl.reads.segments(); segments > 2 {
		t.Errorf("read %d segments of 100 for the last turn", segments)
	}
}
