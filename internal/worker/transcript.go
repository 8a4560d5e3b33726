package worker

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// Transcript is a replayed transcript with the diagnostics of its degraded
// messages: what `turnlog replay` prints for a log file, and what each replay
// run stores for the turns it replayed.
type Transcript struct {
	replay.Result
	Diagnostics []replay.Diagnostic `json:"diagnostics"`
}

// ErrNotReplayed: the workers have not replayed the log for that target yet
// (or not as far as asked). The error is a *NotReplayedError.
var ErrNotReplayed = errors.New("not replayed yet")

// NotReplayedError says how far replay has got.
type NotReplayedError struct {
	// Want is the seq asked for; -1 for "any turn".
	Want int64
	// Through is the last turn/end replayed, -1 before the first.
	Through int64
}

func (e *NotReplayedError) Error() string {
	if e.Want < 0 || e.Through < 0 {
		return "not replayed yet: no turn of the log has been replayed for this target"
	}
	return fmt.Sprintf("not replayed through seq %d yet: replayed through seq %d", e.Want, e.Through)
}

func (e *NotReplayedError) Is(target error) bool { return target == ErrNotReplayed }

// LoadTranscript returns the transcript the replay runs for target stored,
// through the last turn/end they replayed, without reading the raw log: the
// checkpoint says where the runs got to, lists the parts holding the
// transcript's messages and keeps the tool calls still open. The parts are
// read at once, a few at a time. A run that merged parts deletes the old
// ones after writing its checkpoint, so a part gone missing means a newer
// checkpoint, which is read again. Before the first replayed turn it
// returns a *NotReplayedError.
func LoadTranscript(ctx context.Context, log Log, target turnlog.Adapter) (Transcript, error) {
	for attempt := 1; ; attempt++ {
		tr, err := loadTranscript(ctx, log, target)
		if !errors.Is(err, ErrNotFound) || attempt == loadAttempts {
			return tr, err
		}
	}
}

// loadAttempts bounds how often LoadTranscript starts again after a part
// went missing: each time, a run replaced the checkpoint while it read.
const loadAttempts = 3

// loadParallel is how many parts LoadTranscript reads at once.
const loadParallel = 8

// readParts reads and checks the parts refs lists, several at once.
func readParts(ctx context.Context, log Log, dir string, refs []partRef) ([]*part, error) {
	parts := make([]*part, len(refs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(loadParallel)
	for i, ref := range refs {
		g.Go(func() error {
			name := ref.name(dir)
			data, err := log.GetDerived(gctx, name, 0)
			if err != nil {
				return fmt.Errorf("read %s: %w", name, err)
			}
			if parts[i], err = decodePart(data, ref); err != nil {
				return fmt.Errorf("read %s: %w: %w", name, ErrUnusable, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return parts, nil
}

func loadTranscript(ctx context.Context, log Log, target turnlog.Adapter) (Transcript, error) {
	dir := replayDir(target)
	var state replayState
	found, err := loadReplayState(ctx, log, target, &state)
	if err != nil {
		return Transcript{}, err
	}
	if !found || state.Next == 0 {
		return Transcript{}, &NotReplayedError{Want: -1, Through: -1}
	}
	if state.Summary.Replay == nil {
		return Transcript{}, fmt.Errorf("read %s: %w: no replay counts", replayCheckpoint(target), ErrUnusable)
	}
	parts, err := readParts(ctx, log, dir, state.Parts)
	if err != nil {
		return Transcript{}, err
	}
	c := state.Summary.Replay
	out := Transcript{
		Result: replay.Result{
			ThroughSeq: state.Next - 1,
			Counts:     replay.Counts{Native: int(c.Native), Foreign: int(c.Foreign), Degraded: int(c.Degraded), OrphanToolResults: int(c.OrphanToolResults)},
			Context:    c.context(),
		},
	}
	messages, diagnostics := 0, 0
	for _, p := range parts {
		messages += p.header.count()
		diagnostics += len(p.header.Diagnostics)
	}
	// The last turn's open tool calls may still be answered by the next
	// turn; until then the transcript ends with their synthetic results.
	unanswered := state.Open.Tail()
	out.Messages = make([]replay.Message, 0, messages+len(unanswered))
	out.Diagnostics = make([]replay.Diagnostic, 0, diagnostics)
	for _, p := range parts {
		out.Messages = p.appendMessages(out.Messages)
		out.Diagnostics = append(out.Diagnostics, p.header.Diagnostics...)
	}
	out.Messages = append(out.Messages, unanswered...)
	return out, nil
}
