package sessionio

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/sessionlog"
)

// TestManifestRoundTrip: what the manager writes beside a log reads back
// as the Session to create, pointed at that log, without what changes
// with every nudge; a manifest is trusted only for the root it is in.
func TestManifestRoundTrip(t *testing.T) {
	s := &turnlogv1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "chat", UID: "u-new",
			Labels:      map[string]string{"app": "support"},
			Annotations: map[string]string{turnlogv1.AnnotationRequestedAt: "2026-12-07T10:00:00Z", "example.com/owner": "ana"}},
		Spec: turnlogv1.SessionSpec{Retention: turnlogv1.RetentionRetain, Storage: turnlogv1.SessionStorage{LogUID: "u-old"},
			ForkedFrom: &turnlogv1.ForkOrigin{Session: "src", UID: "u-src", CutSeq: 7, AnchorSeq: 7}},
	}
	data, err := Manifest(s)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "requested-at") {
		t.Errorf("the manifest keeps the nudge: %s", data)
	}
	root := sessionlog.Location{Namespace: "team", Session: "chat", UID: "u-old"}
	got, uid, err := ReadManifest(data, root)
	if err != nil {
		t.Fatal(err)
	}
	if uid != "u-new" || got.Spec.Storage.LogUID != "u-old" || got.UID != "" || got.Spec.ForkedFrom.Session != "src" ||
		got.Labels["app"] != "support" || got.Annotations["example.com/owner"] != "ana" {
		t.Errorf("read back %+v (uid %s)", got, uid)
	}

	for _, tc := range []struct {
		name string
		loc  sessionlog.Location
		data string
		want string
	}{
		{"another name", sessionlog.Location{Namespace: "team", Session: "other", UID: "u-old"}, string(data), "names Session team/chat, but is in the root of team/other"},
		{"another namespace", sessionlog.Location{Namespace: "evil", Session: "chat", UID: "u-old"}, string(data), "names Session team/chat, but is in the root of evil/chat"},
		{"another uid", sessionlog.Location{Namespace: "team", Session: "chat", UID: "u-other"}, string(data), "its log is at uid u-old (metadata.uid u-new), but it is in the root of uid u-other"},
		{"not JSON", root, "{", "team/chat/u-old/session.json: not a Session manifest"},
		{"an unknown field", root, `{"apiVersion":"turnlog.dev/v1alpha1","kind":"Session","metadata":{"namespace":"team","name":"chat","uid":"u-old"},"spec":{"url":"s3://elsewhere"}}`, `unknown field "url"`},
		{"another kind", root, `{"apiVersion":"v1","kind":"Secret","metadata":{"namespace":"team","name":"chat","uid":"u-old"}}`, `apiVersion "v1", kind "Secret"`},
		{"no uid", root, `{"apiVersion":"turnlog.dev/v1alpha1","kind":"Session","metadata":{"namespace":"team","name":"chat"}}`, "metadata.uid is missing"},
		{"a path for a source", root, `{"apiVersion":"turnlog.dev/v1alpha1","kind":"Session","metadata":{"namespace":"team","name":"chat","uid":"u-old"},"spec":{"forkedFrom":{"session":"../x","anchorSeq":0,"cutSeq":0}}}`, `spec.forkedFrom.session "../x"`},
	} {
		_, _, err := ReadManifest([]byte(tc.data), tc.loc)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line containing %q", tc.name, err, tc.want)
		}
	}
}
