package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// A fork of a fork links its first turn to the Session whose turn it was
// cut at, however far up the forks that turn was written.
func TestTraceLineage(t *testing.T) {
	session := func(uid string, parent *turnlogv1.Session, cut int64) *turnlogv1.Session {
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}}
		if parent != nil {
			s.Annotations = map[string]string{turnlogv1.AnnotationTraceLineage: childLineage(parent, cut)}
			s.Spec.ForkedFrom = &turnlogv1.ForkOrigin{UID: string(parent.UID), CutSeq: cut}
		}
		return s
	}
	root := session("root", nil, 0)
	a := session("a", root, 40) // a holds root's turns through 40
	b := session("b", a, 60)    // b: root's through 40, a's through 60
	c := session("c", b, 20)    // cut inside root's turns
	d := session("d", b, 50)    // cut inside a's turns
	e := session("e", b, 60)    // cut at b's own cut: a's turn
	for _, tc := range []struct {
		child *turnlogv1.Session
		want  string
	}{{a, "root"}, {b, "a"}, {c, "root"}, {d, "a"}, {e, "a"}} {
		if got := cutTurnOwner(tc.child); got != tc.want {
			t.Errorf("child %s cut at %d (lineage %q): owner %s, want %s", tc.child.UID, tc.child.Spec.ForkedFrom.CutSeq,
				tc.child.Annotations[turnlogv1.AnnotationTraceLineage], got, tc.want)
		}
	}
	// A child made before lineages, or whose annotation was edited away,
	// links to its source.
	delete(c.Annotations, turnlogv1.AnnotationTraceLineage)
	if got := cutTurnOwner(c); got != "b" {
		t.Errorf("without a lineage: owner %s, want the source b", got)
	}
}
