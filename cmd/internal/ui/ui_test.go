package ui

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

const addr = "127.0.0.1:8765"

func testServer(t *testing.T, objs ...client.Object) (*Server, client.WithWatch) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := turnlogv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	tcp, _ := net.ResolveTCPAddr("tcp", addr)
	s, err := newServer(Options{Kube: kube, Namespace: "default"}, tcp)
	if err != nil {
		t.Fatal(err)
	}
	return s, kube
}

func serve(s *Server, method, path, host, body string, header map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(context.Background(), method, "http://"+host+path, strings.NewReader(body))
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	return w
}

// Only requests for the listening address are answered, and a fork needs
// the page's token and its origin: what a page of another site lacks.
func TestForkActionRefusesOtherSites(t *testing.T) {
	source := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "support-chat"}}
	s, kube := testServer(t, source)
	body := `{"atSeq":"15.1","name":"retry"}`
	for _, c := range []struct {
		name, host, body string
		header           map[string]string
		want             int
	}{
		{"another host name (DNS rebinding)", "evil.example:8765", body, map[string]string{"X-Turnlog-Token": s.token}, http.StatusMisdirectedRequest},
		{"no token", addr, body, nil, http.StatusForbidden},
		{"a wrong token", addr, body, map[string]string{"X-Turnlog-Token": "x" + s.token[1:]}, http.StatusForbidden},
		{"another origin", addr, body, map[string]string{"X-Turnlog-Token": s.token, "Origin": "http://evil.example"}, http.StatusForbidden},
		{"a cross-site fetch", addr, body, map[string]string{"X-Turnlog-Token": s.token, "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"an atSeq that is not a decimal", addr, `{"atSeq":"-1"}`, map[string]string{"X-Turnlog-Token": s.token}, http.StatusBadRequest},
		{"the page itself", addr, body, map[string]string{"X-Turnlog-Token": s.token, "Origin": "http://" + addr, "Sec-Fetch-Site": "same-origin"}, http.StatusCreated},
		{"the same name again", addr, body, map[string]string{"X-Turnlog-Token": s.token}, http.StatusConflict},
	} {
		w := serve(s, http.MethodPost, "/api/sessions/default/support-chat/forks", c.host, c.body, c.header)
		if w.Code != c.want {
			t.Errorf("%s: status %d, want %d: %s", c.name, w.Code, c.want, w.Body)
		}
	}
	fork := &turnlogv1.SessionFork{}
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "retry"}, fork); err != nil {
		t.Fatal(err)
	}
	if fork.Spec.AtSeq != "15.1" || fork.Spec.Source.Name != "support-chat" || fork.Spec.Target.Name != "retry" {
		t.Errorf("SessionFork spec %+v, want support-chat at 15.1 named retry", fork.Spec)
	}
}

// The page gets a Session's status summary, never where its log is.
func TestSessionPageHidesStorage(t *testing.T) {
	session := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "chat"},
		Spec:   turnlogv1.SessionSpec{Storage: turnlogv1.SessionStorage{Store: "secret-store"}},
		Status: turnlogv1.SessionStatus{Location: "secret-store:team/chat/uid-1/"}}
	s, _ := testServer(t, session)
	w := serve(s, http.MethodGet, "/api/sessions/default/chat", addr, "", nil)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if strings.Contains(w.Body.String(), "secret-store") {
		t.Errorf("the page is sent the Session's storage: %s", w.Body)
	}
	if w := serve(s, http.MethodGet, "/api/sessions/default/nope", addr, "", nil); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), `"error"`) {
		t.Errorf("a missing Session: status %d %s, want 404 with an error", w.Code, w.Body)
	}
	page := serve(s, http.MethodGet, "/", addr, "", nil)
	if !strings.Contains(page.Body.String(), s.token) || page.Header().Get("Content-Security-Policy") == "" {
		t.Errorf("the page lacks its token or its Content-Security-Policy")
	}
}

func TestFrozenForkAt(t *testing.T) {
	for cut, want := range map[int64]string{16: "15.1", 1: "0.1", 41: "40.1", 0: ""} {
		if got := frozenForkAt(cut); got != want {
			t.Errorf("frozenForkAt(%d) = %q, want %q", cut, got, want)
		}
	}
}

// The tree runs from the oldest ancestor down to the Session, then over
// all its descendants; a parent of the same name made later is not one.
func TestForkTree(t *testing.T) {
	s := func(name, parent, parentUID string) turnlogv1.Session {
		out := turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
		if parent != "" {
			out.Spec.ForkedFrom = &turnlogv1.ForkOrigin{Session: parent, UID: parentUID, CutSeq: 16}
		}
		return out
	}
	all := []turnlogv1.Session{s("root", "", ""), s("mid", "root", "uid-root"), s("sibling", "root", "uid-root"),
		s("leaf", "mid", "uid-mid"), s("stale", "mid", "uid-old")}
	tree := forkTree(&all[1], all)
	if tree.Name != "root" || len(tree.Children) != 1 || tree.Children[0].Name != "mid" || !tree.Children[0].Current {
		t.Fatalf("tree %+v: want root above mid only", tree)
	}
	if kids := tree.Children[0].Children; len(kids) != 1 || kids[0].Name != "leaf" || *kids[0].CutSeq != 16 {
		t.Errorf("mid's children %+v: want leaf, cut 16", kids)
	}
	orphan := s("orphan", "gone", "")
	if tree := forkTree(&orphan, []turnlogv1.Session{orphan}); tree.Name != "gone" || !tree.Missing {
		t.Errorf("a parent that is gone: %+v", tree)
	}
}

// A window asked for with a cursor or a limit that is not one is refused
// with one line saying which.
func TestTurnsRefusesBadWindows(t *testing.T) {
	session := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "chat"}}
	s, _ := testServer(t, session)
	for query, want := range map[string]string{
		"?before=x":             `before=\"x\": want a seq`,
		"?from=12.0.3":          `from=\"12.0.3\": want a seq`,
		"?limit=0":              `limit=\"0\": want a whole number of turns from 1 to 500`,
		"?limit=501":            `from 1 to 500`,
		"?before=3&from=4":      "before and from: give one of them",
		"?before=-1":            `before=\"-1\"`,
		"?from=5.0.-1.ABCDEF00": `want a seq`,
	} {
		w := serve(s, http.MethodGet, "/api/sessions/default/chat/turns"+query, addr, "", nil)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), want) || strings.Count(w.Body.String(), "\n") != 1 {
			t.Errorf("%s: %d %s, want 400 saying %s", query, w.Code, w.Body, want)
		}
	}
	for _, query := range []string{"", "?limit=3", "?before=12", "?from=12.0.-1.abcdef012345"} {
		if w := serve(s, http.MethodGet, "/api/sessions/default/chat/turns"+query, addr, "", nil); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "--store-url") {
			t.Errorf("%s: %d %s, want the conversation's note that no store was given", query, w.Code, w.Body)
		}
	}
	if w := serve(s, http.MethodGet, "/api/sessions/default/nope/turns", addr, "", nil); w.Code != http.StatusNotFound {
		t.Errorf("a missing Session's turns: %d %s, want 404", w.Code, w.Body)
	}
}
