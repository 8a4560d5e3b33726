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
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/sessionlog"
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
	loc := sessionio.Location(s.prefix, session)
	l, err := s.Log(Location{Prefix: loc.Prefix, Namespace: loc.Namespace, Session: loc.Session, UID: loc.UID})
	if err != nil {
		return nil, err
	}
	l.target = sessionio.Target(session.Spec.Adapter)
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
		Spec:       turnlogv1.SessionSpec{Adapter: sessionio.APIAdapter(target)},
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
	if err := ForkSession(ctx, kube, fork, nil); err != nil {
		return nil, 0, err
	}
	l, err := s.OpenSession(ctx, kube, namespace, fork.Status.ChildName)
	return l, *fork.Status.CutSeq, err
}

// ForkSession creates fork (a SessionFork; set GenerateName instead of Name
// for a name the API server picks) and waits until the manager has made
// its child, filling in fork's status: ChildName, CutSeq, CutTurn,
// CutReason. It needs no object store. A SessionFork of that name that
// exists already is waited for if it forks the same source at the same
// atSeq, and an error otherwise. waiting, if not nil, is called each time
// the reason the fork is not done yet changes (e.g. TurnInProgress: the
// anchor's turn has not ended).
func ForkSession(ctx context.Context, kube client.Client, fork *turnlogv1.SessionFork, waiting func(reason, message string)) error {
	want := fork.Spec
	if err := kube.Create(ctx, fork); apierrors.IsAlreadyExists(err) {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(fork), fork); err != nil {
			return fmt.Errorf("SessionFork %s/%s: %w", fork.Namespace, fork.Name, err)
		}
		if fork.Spec.Source != want.Source || fork.Spec.AtSeq != want.AtSeq {
			return fmt.Errorf("SessionFork %s/%s already exists and forks %s at %s, not %s at %s",
				fork.Namespace, fork.Name, fork.Spec.Source.Name, fork.Spec.AtSeq, want.Source.Name, want.AtSeq)
		}
	} else if err != nil {
		return fmt.Errorf("create SessionFork %s/%s%s: %w", fork.Namespace, fork.Name, fork.GenerateName, err)
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	last := ""
	for {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(fork), fork); err != nil {
			return fmt.Errorf("SessionFork %s/%s: %w", fork.Namespace, fork.Name, err)
		}
		c := meta.FindStatusCondition(fork.Status.Conditions, turnlogv1.ConditionSucceeded)
		switch {
		case c != nil && c.Status == metav1.ConditionTrue && fork.Status.CutSeq != nil:
			return nil
		case c != nil && c.Status == metav1.ConditionFalse:
			return fmt.Errorf("SessionFork %s/%s failed: %s: %s", fork.Namespace, fork.Name, c.Reason, c.Message)
		case c != nil && waiting != nil && c.Reason != last:
			last = c.Reason
			waiting(c.Reason, c.Message)
		}
		select {
		case <-ctx.Done():
			why := "no status yet"
			if c != nil {
				why = strings.TrimSpace(c.Reason + ": " + c.Message)
			}
			return fmt.Errorf("SessionFork %s/%s not done (%s): %w", fork.Namespace, fork.Name, why, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// Nudge asks the manager to look at the log now (the turnlog.dev/requested-at
// annotation). It needs a log opened through Kubernetes; without one it does
// nothing.
func (l *Log) Nudge(ctx context.Context) error { return l.NudgeWith(ctx, nil) }

// NudgeWith is Nudge that also sets annotations on the Session, in the same
// patch: e.g. where an imported pi-coding-agent session came from
// (PiSession.Annotations).
func (l *Log) NudgeWith(ctx context.Context, annotations map[string]string) error {
	if l.kube == nil {
		return nil
	}
	return sessionio.Nudge(ctx, l.kube, l.session, annotations)
}

// nudge is the Appender's best-effort Nudge: the log is written either way.
func (l *Log) nudge(ctx context.Context) { _ = l.Nudge(ctx) }

// ImportSession creates the Session namespace/name if it does not exist
// (with the defaults of its spec), writes events as its log, and nudges it,
// setting annotations in the same patch. A Session whose log is not empty
// is left alone, with an *AlreadyWrittenError. If only the nudge fails,
// the log is returned with a *NudgeError: the manager sees the log at its
// next poll. The events are usually read with ReadEvents or ReadPiSession
// before, so a bad file creates nothing.
func (s *Store) ImportSession(ctx context.Context, kube client.Client, namespace, name string, events []Event, annotations map[string]string) (*Log, error) {
	var opened *Log
	_, _, err := sessionio.Import(ctx, kube, func(_ context.Context, session *turnlogv1.Session) (*sessionlog.Log, error) {
		l, err := s.sessionLog(kube, session)
		if err != nil {
			return nil, err
		}
		opened = l
		return l.log, nil
	}, namespace, name, ioEvents(events), annotations)
	return opened, err
}

// AlreadyWrittenError: ImportSession found the Session's log not empty.
type AlreadyWrittenError = sessionio.AlreadyWrittenError

// NudgeError: the log was written, but the nudge after it failed; the
// manager sees the log at its next poll.
type NudgeError = sessionio.NudgeError
