package sessionio

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/sessionlog"
)

// The manifest is what the manager writes beside a Session's log
// (docs/log-format.md, "The Session's manifest"): the Session object as
// it would be applied again, with its uid, so that a cluster that lost it
// can adopt the log (`turnlog adopt`). Status is not in it: the store's
// log and derived data are.

// manifestDroppedAnnotations are annotations a manifest leaves out: they
// change with every nudge, or copy the object whole.
var manifestDroppedAnnotations = []string{
	turnlogv1.AnnotationRequestedAt,
	"kubectl.kubernetes.io/last-applied-configuration",
}

// Manifest is the manifest of session.
func Manifest(session *turnlogv1.Session) ([]byte, error) {
	annotations := maps.Clone(session.Annotations)
	for _, a := range manifestDroppedAnnotations {
		delete(annotations, a)
	}
	if len(annotations) == 0 {
		annotations = nil
	}
	m := turnlogv1.Session{
		TypeMeta: metav1.TypeMeta{APIVersion: turnlogv1.GroupVersion.String(), Kind: "Session"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: session.Namespace, Name: session.Name, UID: session.UID,
			Labels: session.Labels, Annotations: annotations, CreationTimestamp: session.CreationTimestamp,
		},
		Spec: session.Spec,
	}
	return json.Marshal(&m)
}

// ManifestError is a manifest that cannot be adopted: its key and why, in
// one line.
type ManifestError struct {
	Key    string
	Reason string
}

func (e *ManifestError) Error() string { return e.Key + ": " + e.Reason }

// ReadManifest decodes the manifest found in loc's root and checks that it
// is of the Session whose log is there: the same namespace and name, and
// the root's uid its own or its spec.storage.logUID. It returns the
// Session as `turnlog adopt` creates it (metadata and spec, no uid, its
// storage pointing at loc's log; its creation time says when the one the
// manifest is of was created) and the uid it had. A host that wrote a
// manifest can make it name nothing outside its own root.
func ReadManifest(data []byte, loc sessionlog.Location) (*turnlogv1.Session, types.UID, error) {
	root, err := loc.Root()
	if err != nil {
		return nil, "", err
	}
	bad := func(format string, a ...any) error {
		return &ManifestError{Key: root + "session.json", Reason: fmt.Sprintf(format, a...)}
	}
	var m turnlogv1.Session
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, "", bad("not a Session manifest: %v", err)
	}
	switch {
	case m.APIVersion != turnlogv1.GroupVersion.String() || m.Kind != "Session":
		return nil, "", bad("apiVersion %q, kind %q: want %s, Session", m.APIVersion, m.Kind, turnlogv1.GroupVersion)
	case m.Namespace != loc.Namespace || m.Name != loc.Session:
		return nil, "", bad("names Session %s/%s, but is in the root of %s/%s", m.Namespace, m.Name, loc.Namespace, loc.Session)
	case m.UID == "":
		return nil, "", bad("metadata.uid is missing")
	case m.LogUID() != loc.UID:
		return nil, "", bad("its log is at uid %s (metadata.uid %s), but it is in the root of uid %s", m.LogUID(), m.UID, loc.UID)
	}
	if f := m.Spec.ForkedFrom; f != nil && (f.Session == "" || strings.Contains(f.Session, "/")) {
		return nil, "", bad("spec.forkedFrom.session %q: want a Session's name", f.Session)
	}
	s := &turnlogv1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name, Labels: m.Labels, Annotations: m.Annotations, CreationTimestamp: m.CreationTimestamp},
		Spec:       m.Spec,
	}
	s.Spec.Storage.LogUID = loc.UID
	return s, m.UID, nil
}

// ErrNoManifest: a root holds a log but no manifest (written by a manager
// from before manifests, or not yet): its Session cannot be rebuilt from
// the store alone.
var ErrNoManifest = errors.New("no session.json beside the log")
