package agenthost

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// OpenSession returns the log of the Session namespace/name, read through
// kube (a controller-runtime client whose scheme has turnlog.dev/v1alpha1,
// see api/v1alpha1.AddToScheme). Its transcripts are read for the Session's
// spec.adapter, and its Appenders nudge the Session (the
// turnlog.dev/requested-at annotation) after each flush that ended a turn,
// so the workers replay it at once rather than at the manager's next poll.
// The nudge is best effort: a host without permission to patch Sessions
// still appends, and the turn is replayed a little later.
func (s *Store) OpenSession(ctx context.Context, kube client.Client, namespace, name string) (*Log, error) {
	session := &turnlogv1.Session{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, session); err != nil {
		return nil, fmt.Errorf("Session %s/%s: %w", namespace, name, err)
	}
	return s.sessionLog(kube, session)
}

func (s *Store) sessionLog(kube client.Client, session *turnlogv1.Session) (*Log, error) {
	// The store is the one the Session's spec.storage.store names on the
	// manager; the host was given its URL and prefix.
	loc := Location{Prefix: s.prefix, Namespace: session.Namespace, Session: session.Name, UID: string(session.UID)}
	l, err := s.Log(loc)
	if err != nil {
		return nil, err
	}
	a := session.Spec.Adapter
	l.target = Adapter{Kind: a.Kind, API: a.API, Provider: a.Provider, Model: a.Model, ReleaseLine: a.ReleaseLine}
	l.kube, l.session = kube, client.ObjectKeyFromObject(session)
	return l, nil
}

// CreateSession creates the Session namespace/name for target (the adapter
// replay builds transcripts for; the zero Adapter defaults to the log's
// session/start adapter) and returns its empty log. A Session of that name
// that already exists is an error: its log is someone else's conversation.
func (s *Store) CreateSession(ctx context.Context, kube client.Client, namespace, name string, target Adapter) (*Log, error) {
	session := &turnlogv1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: turnlogv1.SessionSpec{Adapter: turnlogv1.Adapter{
			Kind: target.Kind, API: target.API, Provider: target.Provider, Model: target.Model, ReleaseLine: target.ReleaseLine}},
	}
	if err := kube.Create(ctx, session); err != nil {
		return nil, fmt.Errorf("create Session %s/%s: %w", namespace, name, err)
	}
	return s.sessionLog(kube, session)
}

// Fork creates a SessionFork of source at atSeq (a non-negative decimal,
// e.g. "41" or a UI's frozen node "40.1"; see docs/log-format.md "Forks")
// whose child Session is named child, waits until the manager has made the
// child, and returns the child's log. The child's transcript is what its
// first request is built from: read it with WaitTranscript(ctx, cutSeq).
func (s *Store) Fork(ctx context.Context, kube client.Client, namespace, source, atSeq, child string) (log *Log, cutSeq int64, err error) {
	fork := &turnlogv1.SessionFork{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: child},
		Spec: turnlogv1.SessionForkSpec{
			Source: turnlogv1.SessionReference{Name: source}, AtSeq: atSeq,
			Target: turnlogv1.ForkTarget{Name: child},
		},
	}
	if err := kube.Create(ctx, fork); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, 0, fmt.Errorf("create SessionFork %s/%s: %w", namespace, child, err)
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(fork), fork); err != nil {
			return nil, 0, fmt.Errorf("SessionFork %s/%s: %w", namespace, child, err)
		}
		c := meta.FindStatusCondition(fork.Status.Conditions, turnlogv1.ConditionSucceeded)
		switch {
		case c != nil && c.Status == metav1.ConditionTrue && fork.Status.CutSeq != nil:
			l, err := s.OpenSession(ctx, kube, namespace, fork.Status.ChildName)
			return l, *fork.Status.CutSeq, err
		case c != nil && c.Status == metav1.ConditionFalse:
			return nil, 0, fmt.Errorf("SessionFork %s/%s failed: %s: %s", namespace, child, c.Reason, c.Message)
		}
		select {
		case <-ctx.Done():
			why := "no status yet"
			if c != nil {
				why = strings.TrimSpace(c.Reason + ": " + c.Message)
			}
			return nil, 0, fmt.Errorf("SessionFork %s/%s not done (%s): %w", namespace, child, why, ctx.Err())
		case <-t.C:
		}
	}
}

// Nudge asks the manager to look at the log now (the turnlog.dev/requested-at
// annotation). It needs a log opened through Kubernetes; without one it does
// nothing.
func (l *Log) Nudge(ctx context.Context) error {
	if l.kube == nil {
		return nil
	}
	stamp := time.Now().UTC().Format(time.RFC3339Nano)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, turnlogv1.AnnotationRequestedAt, stamp)
	s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: l.session.Namespace, Name: l.session.Name}}
	if err := l.kube.Patch(ctx, s, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		return fmt.Errorf("nudge Session %s: %w", l.session, err)
	}
	return nil
}

// nudge is the Appender's best-effort Nudge: the log is written either way.
func (l *Log) nudge(ctx context.Context) { _ = l.Nudge(ctx) }
