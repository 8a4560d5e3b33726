// Package derived is the data the workers derive from a Session's log and
// store beside it, and the one place that knows its layout: where it is
// kept, how it is encoded, how a reader checks it and loads it. The worker
// runs (internal/worker) write it, each through the checkpoint it holds
// (AssemblyCheckpoint, ReplayCheckpoint); the controllers, agent hosts
// (agenthost) and the CLI read it through this package.
//
// Under a Session's root in the store (sessionlog: [<prefix>/]<namespace>/
// <name>/<uid>/), next to the raw log's segments:
//
//	derived/assembly/checkpoint.json            where assembly got to (AssemblyState)
//	derived/assembly/<first seq>.json           the messages one assembly run assembled
//	derived/transcript/<target>/checkpoint.json where replay for one target got to (ReplayState),
//	                                            listing the transcript's parts
//	derived/transcript/<target>/<from>-<to>.jsonl
//	                                            a part: consecutive messages of the transcript
//	derived/traces/exported.json                how far the turns' spans were exported (TracesMarkName)
//
// <target> is a hash of the replay target, release line included
// (TranscriptDir), so a Session whose spec.adapter changes starts a new
// transcript. A checkpoint carries a Summary: what the controller puts in
// the Session's status. Everything here can be computed again from the raw
// log, which is never written over, so anything that does not check out
// (ErrUnusable) is recomputed rather than believed.
package derived

import (
	"context"
	"errors"
	"fmt"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Task names the derived data a worker run produces, and the run.
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

// Log is the part of one session's log the workers and readers use: the
// raw events, read-only, and a place for derived data beside them.
type Log interface {
	// Head returns the seq of the log's last event, -1 for an empty log,
	// without reading the whole log.
	Head(ctx context.Context) (int64, error)
	// Events yields the events from seq from through the head, decoded
	// and checked; iteration stops at the first error, which is yielded.
	Events(ctx context.Context, from int64) turnlog.Events
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
	// Beside is the log of the Session session, uid uid, in the same
	// namespace and store: where the transcript parts a fork's child
	// shares with its source are read. A name that cannot be a Session's
	// is an error.
	Beside(session, uid string) (Log, error)
}
