package derived

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// TranscriptDir is where the transcript for target is kept. Each target has its
// own, so a Session whose spec.adapter changes starts a new transcript and
// never mixes messages replayed for two targets. ("transcript/", not the
// "replay/" of releases whose parts were single JSON objects: those are not
// read, and the workers replay such a Session again into the new form.) The
// release line is part of the target: transcripts stored before targets had
// one followed 0.73's rules, so every target hashes its line, an empty one
// included, and such a Session is replayed again under its line's rules.
// A target that drops refused blocks has its own transcript too; one that
// keeps them hashes as targets did before the choice existed.
func TranscriptDir(target turnlog.Adapter) string {
	key := target.Kind + "\x00" + target.API + "\x00" + target.Provider + "\x00" + target.Model + "\x00line=" + target.ReleaseLine
	if target.DropsRefused() {
		key += "\x00refused=" + turnlog.RefusedBlocksDrop
	}
	sum := sha256.Sum256([]byte(key))
	return "transcript/" + hex.EncodeToString(sum[:8])
}

// ReplayCheckpointName names the checkpoint of the transcript for target.
func ReplayCheckpointName(target turnlog.Adapter) string {
	return TranscriptDir(target) + "/checkpoint.json"
}

// LoadReplayState reads the replay checkpoint for target into state: a
// checkpoint whose list of parts cannot be a transcript's is unusable, like
// one that does not decode.
func LoadReplayState(ctx context.Context, log Log, target turnlog.Adapter, state *ReplayState) (found bool, err error) {
	return loadState(ctx, log, ReplayCheckpointName(target), state)
}

// ReplayState is the checkpoint replay resumes from.
type ReplayState struct {
	Summary Summary `json:"summary"`
	// Next is the first seq after the last replayed turn/end.
	Next int64 `json:"next"`
	// Open are the tool calls of the transcript's last assistant message
	// that the next turn may still answer. The transcript is the segments'
	// messages followed by Open.Tail().
	Open replay.OpenCalls `json:"open,omitzero"`
	// Context is where the transcript's context starts and what edits left
	// out of it, which the next run's context events need. A checkpoint
	// written before it was recorded has none, and one of a transcript that
	// a compaction or an edit changed is replayed again.
	Context *replay.ContextState `json:"context,omitempty"`
	// Parts are the stored parts of the transcript, in order.
	Parts []PartRef `json:"parts,omitempty"`
	// Epoch is the Next of the run's pass that last rewrote the whole
	// transcript (a compaction, an edit), 0 for none: the parts written
	// since carry it in their names (PartRef.Epoch).
	Epoch int64 `json:"epoch,omitempty"`
}

func (s ReplayState) at() (Summary, int64) { return s.Summary, s.Next }

func (s ReplayState) withSummary(sum Summary) ReplayState {
	s.Summary = sum
	return s
}

func (s ReplayState) check() error {
	if err := checkParts(s.Parts); err != nil {
		return err
	}
	if c := s.Summary.Replay; s.Context == nil && c != nil && c.Compactions+c.Edits > 0 {
		return errors.New("it does not say where the context starts")
	}
	return nil
}

// usable: a run carries the replay counts on, so it cannot resume from a
// checkpoint without them, which a reader of the summary may still use.
func (s ReplayState) usable(head int64) bool {
	return s.Summary.Replay != nil && fits(s.Summary, s.Next, head)
}

func (s ReplayState) parts() []PartRef { return s.Parts }

// history: a state whose parts are all final (its last part sealed) is
// kept, so that a fork cut after it starts from it and shares its parts
// (SeedFork): no later run of the Session's deletes them.
func (s ReplayState) history(int64) (ReplayState, bool) {
	if len(s.Parts) == 0 || finalParts(s.Parts) != len(s.Parts) {
		return s, false
	}
	s.Summary.New, s.Summary.NewTotal = nil, 0
	return s, true
}

// ReplayCheckpoint is a replay run's checkpoint: where replay for one
// target got to and the parts of its transcript.
type ReplayCheckpoint struct {
	Checkpoint[ReplayState]
}

// OpenReplay opens the checkpoint of the transcript for target; with
// startOver the run replays the log from its start, into new parts.
func OpenReplay(ctx context.Context, log Log, target turnlog.Adapter, startOver bool) (*ReplayCheckpoint, error) {
	fresh := func() ReplayState {
		return ReplayState{Summary: Summary{Task: TaskReplay, ThroughSeq: -1, Replay: &ReplayCounts{Target: target}}}
	}
	c, err := open(ctx, log, ReplayCheckpointName(target), TranscriptDir(target), fresh, startOver)
	if err != nil {
		return nil, err
	}
	return &ReplayCheckpoint{c}, nil
}

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
func readParts(ctx context.Context, log Log, dir string, refs []PartRef) ([]*part, error) {
	parts := make([]*part, len(refs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(loadParallel)
	for i, ref := range refs {
		g.Go(func() error {
			name := ref.Name(dir)
			holder, err := ref.holder(log)
			if err != nil {
				return err
			}
			data, err := holder.GetDerived(gctx, name, 0)
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
	dir := TranscriptDir(target)
	var state ReplayState
	found, err := LoadReplayState(ctx, log, target, &state)
	if err != nil {
		return Transcript{}, err
	}
	if !found || state.Next == 0 {
		return Transcript{}, &NotReplayedError{Want: -1, Through: -1}
	}
	if state.Summary.Replay == nil {
		return Transcript{}, fmt.Errorf("read %s: %w: no replay counts", ReplayCheckpointName(target), ErrUnusable)
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
			Context:    c.Context(),
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

// ReadParts returns the messages and the diagnostics that the parts the
// state lists hold, in order: what a replay run that rebuilds the
// transcript (after a compaction or a context edit) starts from.
func (c *ReplayCheckpoint) ReadParts(ctx context.Context) ([]replay.Message, []replay.Diagnostic, error) {
	parts, err := readParts(ctx, c.log, c.dir, c.State.Parts)
	if err != nil {
		return nil, nil, err
	}
	var msgs []replay.Message
	var diags []replay.Diagnostic
	for _, p := range parts {
		msgs = p.appendMessages(msgs)
		diags = append(diags, p.header.Diagnostics...)
	}
	return msgs, diags, nil
}
