package derived

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// StoreLog is a session's log as sessionlog keeps it in object storage.
type StoreLog struct {
	Log *sessionlog.Log
}

// Head returns the seq of the log's last event, -1 for an empty log.
func (s StoreLog) Head(ctx context.Context) (int64, error) {
	h, err := s.Log.Head(ctx)
	if err != nil {
		return 0, err
	}
	return h.Head(), nil
}

// Events reads the log from seq from, checking its structure on the way:
// derived data is only ever built from a well-formed log.
func (s StoreLog) Events(ctx context.Context, from int64) turnlog.Events {
	return s.Log.Events(ctx, from, math.MaxInt64)
}

// GetDerived returns a derived object of at most limit bytes (at most
// sessionlog.MaxDerivedBytes); ErrNotFound when it is absent.
func (s StoreLog) GetDerived(ctx context.Context, name string, limit int64) ([]byte, error) {
	data, err := s.Log.GetDerived(ctx, name, limit)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if _, ok := errors.AsType[*sessionlog.DataError](err); ok {
		return nil, fmt.Errorf("%w: %w", ErrUnusable, err)
	}
	return data, err
}

// PutDerived creates or replaces a derived object.
func (s StoreLog) PutDerived(ctx context.Context, name string, data []byte) error {
	return s.Log.PutDerived(ctx, name, data)
}

// DeleteDerived removes a derived object.
func (s StoreLog) DeleteDerived(ctx context.Context, name string) error {
	return s.Log.DeleteDerived(ctx, name)
}

// CopyDerivedFrom copies src's derived object name to the same name here,
// inside the store; ErrNotFound when src has none.
func (s StoreLog) CopyDerivedFrom(ctx context.Context, src StoreLog, name string) error {
	err := s.Log.CopyDerivedFrom(ctx, src.Log, name)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// Beside is the log of the Session session, uid uid, beside this one.
func (s StoreLog) Beside(session, uid string) (Log, error) {
	l, err := s.Log.Beside(session, uid)
	if err != nil {
		return nil, err
	}
	return StoreLog{Log: l}, nil
}

// ListDerived returns the names of the derived objects under dir.
func (s StoreLog) ListDerived(ctx context.Context, dir string) ([]string, error) {
	return s.Log.ListDerived(ctx, dir)
}

// Referred reports whether a fork's child has pinned the log.
func (s StoreLog) Referred(ctx context.Context) (bool, error) {
	return s.Log.Pinned(ctx)
}
