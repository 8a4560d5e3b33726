package alerts

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/sessionio"
)

// createSession creates a Session without a log in store ("": default)
// with retention ("": the default, Delete).
func (h *harness) createSession(t *testing.T, namespace, name, store string, retention turnlogv1.RetentionPolicy) *turnlogv1.Session {
	t.Helper()
	s := &turnlogv1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       turnlogv1.SessionSpec{Storage: turnlogv1.SessionStorage{Store: store}, Retention: retention},
	}
	if err := h.cluster.client.Create(t.Context(), s); err != nil {
		t.Fatalf("create Session %s/%s: %v", namespace, name, err)
	}
	return s
}

// importLog imports testdata/logs/file as Session namespace/name with
// `turnlog import`, as a user would: the CLI creates the Session, writes
// the log into the default store and nudges.
func (h *harness) importLog(t *testing.T, namespace, name, file string) {
	t.Helper()
	runCLI(t, h.turnlog, "import", "--kubeconfig", h.cluster.kubeconfig, "-n", namespace, "--session", name,
		"--store-url", h.storeURL, filepath.Join(repoRoot, "testdata", "logs", file))
}

// sessionRoot is the directory of s's log root in the default file://
// store.
func (h *harness) sessionRoot(t *testing.T, s *turnlogv1.Session) string {
	t.Helper()
	root, err := sessionio.Location("", s).Root()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(h.storeDir, filepath.FromSlash(root))
}

// placeLog puts a log directory, written by write, in place of s's log in
// the default store, all at once: the manager never sees half of it.
func (h *harness) placeLog(t *testing.T, s *turnlogv1.Session, write func(logDir string) error) {
	t.Helper()
	staging, err := os.MkdirTemp(h.dir, "log-")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(staging); err != nil {
		t.Fatal(err)
	}
	root := h.sessionRoot(t, s)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(staging, filepath.Join(root, "log")); err != nil {
		t.Fatal(err)
	}
}

// damagedLog is a log of two segments (file name: content) whose first
// holds a line cut off in the middle (seq 2). The second segment holds a
// whole turn, so the log's head — read backwards from the last segment to
// a turn/end — is found without reading the first.
var damagedLog = map[string]string{
	"00000000000000000000.jsonl": `{"seq":0,"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}}
{"seq":1,"type":"turn/start","turn":1}
{"seq":2,"type":"user/message","turn":1,"content":"Why does the bu
{"seq":3,"type":"turn/end","turn":1,"reason":"aborted"}
`,
	"00000000000000000004.jsonl": `{"seq":4,"type":"turn/start","turn":2}
{"seq":5,"type":"user/message","turn":2,"content":"Are you there?"}
{"seq":6,"type":"turn/end","turn":2,"reason":"aborted"}
`,
}

// nudge sets the Session's turnlog.dev/requested-at, as a host does after
// writing its log.
func (h *harness) nudge(t *testing.T, s *turnlogv1.Session) {
	t.Helper()
	if err := sessionio.Nudge(t.Context(), h.cluster.client, client.ObjectKeyFromObject(s), nil); err != nil {
		t.Fatal(err)
	}
}

// readyOf says what the Ready condition of the Session namespace/name
// is, for the test's log.
func (h *harness) readyOf(namespace, name string) func(t *testing.T) string {
	return func(t *testing.T) string {
		s := &turnlogv1.Session{}
		if err := h.cluster.client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
			return err.Error()
		}
		c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady)
		if c == nil {
			return fmt.Sprintf("Session %s/%s has no Ready condition", namespace, name)
		}
		return fmt.Sprintf("Session %s/%s is Ready=%s, reason %s: %s", namespace, name, c.Status, c.Reason, c.Message)
	}
}

// fork imports a clean log and forks it at its first turn: the dashboard's
// SessionForks panel counts SessionForks.
func (h *harness) fork(t *testing.T) {
	h.importLog(t, nsForks, "source", "aborted-turn.jsonl")
	f := &turnlogv1.SessionFork{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsForks, Name: "retry"},
		Spec:       turnlogv1.SessionForkSpec{Source: turnlogv1.SessionReference{Name: "source"}, AtSeq: "1"},
	}
	if err := h.cluster.client.Create(t.Context(), f); err != nil {
		t.Fatal(err)
	}
}

// labelOrphanedLog marks the manager's records of orphaned logs
// (controllers.LabelOrphanedLog; this package does not import the
// controllers, see controlPlaneAssets).
const labelOrphanedLog = "turnlog.dev/orphaned-log"

// orphanRecords says what the records of orphaned logs in the manager's
// namespace hold, as `kubectl get configmaps -l turnlog.dev/orphaned-log`
// shows them.
func (h *harness) orphanRecords(t *testing.T) string {
	t.Helper()
	list := &corev1.ConfigMapList{}
	if err := h.cluster.client.List(t.Context(), list, client.InNamespace(nsManager), client.HasLabels{labelOrphanedLog}); err != nil {
		return err.Error()
	}
	var records []string
	for _, cm := range list.Items {
		records = append(records, fmt.Sprintf("%s: Session %s/%s, last error %q", cm.Name, cm.Data["namespace"], cm.Data["session"], cm.Data["lastError"]))
	}
	return fmt.Sprintf("%d records: %s", len(records), strings.Join(records, "; "))
}
