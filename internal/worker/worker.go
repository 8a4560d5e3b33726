// Package worker runs assembly and replay over one session's log in object
// storage. It reads the raw events, writes the derived results and a
// checkpoint beside the log, and returns a small Summary for the controller.
//
// Each run starts at the checkpoint the previous one left, at a turn
// boundary, so the work per new turn is proportional to the new events, not
// to the whole log. Only whole turns are committed: a turn still streaming is
// read again by the next run, once its turn/end has arrived.
//
// The same code runs inside the manager (local worker mode) and as
// `turnlog worker assemble|replay` in a Job's pod.
package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Task names a kind of worker run.
type Task string

const (
	// TaskAssemble assembles the responses of finished turns.
	TaskAssemble Task = "assemble"
	// TaskReplay replays the transcript through the last finished turn.
	TaskReplay Task = "replay"
)

// ParseTask checks a task name given on a command line.
func ParseTask(s string) (Task, error) {
	switch t := Task(s); t {
	case TaskAssemble, TaskReplay:
		return t, nil
	}
	return "", fmt.Errorf("unknown worker task %q (want assemble or replay)", s)
}

// ErrNotFound is what Log.GetDerived returns for a missing object; a Log
// implementation wraps its store's own not-found error in it or returns it.
var ErrNotFound = errors.New("derived object not found")

// ErrUnusable: a derived object is there but cannot be used: larger than
// the reader's limit, or not what its name says it holds. It is derived
// data, so the remedy is to compute it again.
var ErrUnusable = errors.New("unusable derived object")

// Log is the part of one session's log the worker uses: the raw events,
// read-only, and a place for derived data beside them.
type Log interface {
	// Head returns the seq of the log's last event, -1 for an empty log,
	// without reading the whole log.
	Head(ctx context.Context) (int64, error)
	// Events reads the events from seq from through the head.
	Events(ctx context.Context, from int64) (Events, error)
	// GetDerived returns a derived object by name, or an error that
	// errors.Is ErrNotFound. An object larger than limit bytes (limit <= 0:
	// the implementation's own cap) is an error, read no further: derived
	// objects sit where anyone who can write the bucket can forge them.
	GetDerived(ctx context.Context, name string, limit int64) ([]byte, error)
	// PutDerived creates or replaces a derived object.
	PutDerived(ctx context.Context, name string, data []byte) error
	// DeleteDerived removes a derived object; removing one that is absent
	// is not an error.
	DeleteDerived(ctx context.Context, name string) error
}

// Events is a stream of a log's events that must be closed.
type Events interface {
	turnlog.Source
	Close() error
}

// Run runs one task.
func Run(ctx context.Context, task Task, log Log, target turnlog.Adapter) (Summary, error) {
	switch task {
	case TaskAssemble:
		return Assemble(ctx, log)
	case TaskReplay:
		return Replay(ctx, log, target)
	}
	return Summary{}, fmt.Errorf("unknown worker task %q", task)
}
