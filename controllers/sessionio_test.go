package controllers

import (
	"context"
	"fmt"
	"io"

	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// SessionIO writes and reads Sessions' logs from outside the manager, as
// `turnlog import`, `append`, `export` and `transcript` do, through the
// same package, from the store each Session names among Stores (so the
// specs can hand it the manager's own buckets, mem:// ones included).
type SessionIO struct {
	Client client.Client
	Stores Stores
}

func (s *SessionIO) open(ctx context.Context, session *turnlogv1.Session) (*sessionlog.Log, error) {
	st, err := s.Stores.Store(ctx, session.Spec.Storage.StoreName())
	if err != nil {
		return nil, err
	}
	return st.Logs.Log(st.Location(session))
}

func (s *SessionIO) session(ctx context.Context, namespace, name string) (*turnlogv1.Session, *sessionlog.Log, error) {
	session := &turnlogv1.Session{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, session); err != nil {
		return nil, nil, fmt.Errorf("Session %s/%s: %w", namespace, name, err)
	}
	log, err := s.open(ctx, session)
	return session, log, err
}

// Import creates the Session if it does not exist and writes the log read
// from r as its log, which must be empty.
func (s *SessionIO) Import(ctx context.Context, namespace, name string, r io.Reader) (*turnlogv1.Session, int64, error) {
	events, err := sessionio.ReadEvents(r, 0)
	if err != nil {
		return nil, 0, err
	}
	session, _, err := sessionio.Import(ctx, s.Client, s.open, namespace, name, events, nil)
	return session, int64(len(events)), err
}

// Append appends the log fragment read from r and nudges the Session.
func (s *SessionIO) Append(ctx context.Context, namespace, name string, r io.Reader) (first, n int64, err error) {
	session, log, err := s.session(ctx, namespace, name)
	if err != nil {
		return 0, 0, err
	}
	return sessionio.Append(ctx, s.Client, client.ObjectKeyFromObject(session), log, r)
}

// Export writes the Session's log to w.
func (s *SessionIO) Export(ctx context.Context, namespace, name string, w io.Writer) error {
	_, log, err := s.session(ctx, namespace, name)
	if err != nil {
		return err
	}
	return sessionio.Export(ctx, log, w)
}

// Transcript returns the transcript the workers stored for the target
// that target makes of the Session's spec.adapter.
func (s *SessionIO) Transcript(ctx context.Context, namespace, name string, target func(turnlog.Adapter) turnlog.Adapter) (derived.Transcript, turnlog.Adapter, error) {
	session, log, err := s.session(ctx, namespace, name)
	if err != nil {
		return derived.Transcript{}, turnlog.Adapter{}, err
	}
	t := target(sessionio.Target(session.Spec.Adapter))
	tr, err := derived.LoadTranscript(ctx, derived.StoreLog{Log: log}, t)
	return tr, t, err
}
