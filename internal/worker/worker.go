// Package worker runs assembly and replay over one session's log in object
// storage. It reads the raw events, writes the derived results and a
// checkpoint beside the log (their layout is internal/derived's), and
// returns a small Summary for the controller.
//
// Each run starts at the checkpoint the previous one left, at a turn
// boundary, so the work per new turn is proportional to the new events, not
// to the whole log. Only whole turns are committed: a turn still streaming is
// read again by the next run, once its turn/end has arrived.
//
// The same command line runs inside the manager (local worker mode) and
// as `turnlog worker assemble|replay` in a Job's pod (Invocation).
package worker

import (
	"context"
	"fmt"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// Run runs one task.
func Run(ctx context.Context, task derived.Task, log derived.Log, target turnlog.Adapter) (derived.Summary, error) {
	switch task {
	case derived.TaskAssemble:
		return Assemble(ctx, log)
	case derived.TaskReplay:
		return Replay(ctx, log, target)
	}
	return derived.Summary{}, fmt.Errorf("unknown worker task %q", task)
}
