package sessionio

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// A Session's root comes from its metadata alone: a Session created again
// under the same name gets another root, and nothing in the spec moves it.
func TestLocation(t *testing.T) {
	s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "chat-1", UID: types.UID("0d9e")}}
	s.Spec.Storage.Store = "other"
	for _, tc := range []struct {
		prefix, uid, want string
	}{
		{"", "0d9e", "team-a/chat-1/0d9e/"},
		{"tenants/eu", "0d9e", "tenants/eu/team-a/chat-1/0d9e/"},
		{"", "7c41", "team-a/chat-1/7c41/"},
	} {
		s.UID = types.UID(tc.uid)
		root, err := Location(tc.prefix, s).Root()
		if err != nil || root != tc.want {
			t.Errorf("prefix %q uid %s: root %q, %v; want %q", tc.prefix, tc.uid, root, err, tc.want)
		}
	}
}

// The nudge sets requested-at to a time the controller parses, and the
// given annotations, leaving the others alone.
func TestNudge(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := turnlogv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "chat-1",
		Annotations: map[string]string{"team": "support"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(s).Build()
	before := time.Now()
	if err := Nudge(context.Background(), c, client.ObjectKeyFromObject(s), map[string]string{"turnlog.dev/pi-session": "abc"}); err != nil {
		t.Fatal(err)
	}
	got := &turnlogv1.Session{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), got); err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339Nano, got.Annotations[turnlogv1.AnnotationRequestedAt])
	if err != nil || at.Before(before.Add(-time.Second)) {
		t.Errorf("requested-at %q: %v", got.Annotations[turnlogv1.AnnotationRequestedAt], err)
	}
	if got.Annotations["team"] != "support" || got.Annotations["turnlog.dev/pi-session"] != "abc" {
		t.Errorf("annotations %v", got.Annotations)
	}
	err = Nudge(context.Background(), c, client.ObjectKey{Namespace: "team-a", Name: "gone"}, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "nudge Session team-a/gone: ") {
		t.Errorf("missing Session: %v", err)
	}
}

// Events lose their seq and keep every other member byte for byte, in
// order; a fragment is checked from the seq it must start at.
func TestReadEvents(t *testing.T) {
	events, err := ReadEvents(strings.NewReader(
		`{"type":"turn/start","seq":5,"turn":2,"x":{"b":1, "a":2}}`+"\n"+`{"seq":6,"type":"turn/end","turn":2,"reason":"stop"}`+"\n"), 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || string(events[0].Body) != `{"type":"turn/start","turn":2,"x":{"b":1, "a":2}}` || events[1].Type != "turn/end" {
		t.Errorf("events: %q", events)
	}
	if _, err := ReadEvents(strings.NewReader(`{"seq":0,"type":"turn/start","turn":1}`+"\n"), 5); err == nil {
		t.Error("a fragment starting at seq 0 was read as one starting at 5")
	}
	if _, err := ReadEvents(strings.NewReader(""), 0); err == nil || err.Error() != "no events to write" {
		t.Errorf("empty input: %v", err)
	}
}
