package derived

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// A worker run holds its checkpoint from start to end: it opens it (the
// state the last run committed, or a fresh one when there is none a run
// can resume from), reads the log from where the state ends, folds the
// events into the state and the summary, stores the parts it made and
// commits. AssemblyCheckpoint and ReplayCheckpoint are the two kinds; what
// they share is Checkpoint.

// state is what a checkpoint stores: AssemblyState or ReplayState.
type state[S any] interface {
	AssemblyState | ReplayState
	// at is the summary the state holds and the first seq it does not
	// cover, where a run resumes.
	at() (sum Summary, next int64)
	// withSummary is the state holding sum.
	withSummary(sum Summary) S
	// check reports what, besides not decoding, makes a stored state
	// unusable to any reader.
	check() error
	// usable reports whether a run can resume from the stored state in a
	// log whose last event is head.
	usable(head int64) bool
	// parts are the parts the state lists.
	parts() []PartRef
	// history is the state to keep as a history checkpoint (HistoryDir),
	// if this one, committed after one that ended at prevNext, is to be
	// kept.
	history(prevNext int64) (S, bool)
}

// Checkpoint is a worker run's checkpoint as far as the run has got.
type Checkpoint[S state[S]] struct {
	// State is what Commit stores, with Summary.
	State S
	// Summary is what the run returns: the stored summary with this run's
	// new diagnostics alone.
	Summary Summary
	// From is the first seq no commit covers: where the run resumed, then
	// where its last Commit got to.
	From int64
	// Head is the seq of the log's last event when the run opened the
	// checkpoint.
	Head int64

	log Log
	// name is the checkpoint's object; dir holds the parts of its kind.
	name, dir string
	// listed are the parts the stored checkpoint lists, deleted once one
	// that no longer lists them is stored.
	listed []PartRef
}

// open loads the checkpoint name into a state made by fresh (a new value
// each call, as a checkpoint is decoded into what it points to) and
// decides whether the run resumes from it. The run starts from a fresh
// state instead when asked to (startOver) or when the stored one is
// unusable or does not fit the log: it is derived data, computed again
// from the log rather than believed. Any other error (the store failing)
// is returned and fails the run.
func open[S state[S]](ctx context.Context, log Log, name, dir string, fresh func() S, startOver bool) (Checkpoint[S], error) {
	c := Checkpoint[S]{State: fresh(), log: log, name: name, dir: dir}
	found, err := loadState(ctx, log, name, &c.State)
	if err != nil && !errors.Is(err, ErrUnusable) {
		return c, err
	}
	head, herr := log.Head(ctx)
	if herr != nil {
		return c, fmt.Errorf("find the log's head: %w", herr)
	}
	c.Head = head
	if err == nil {
		c.listed = c.State.parts()
	}
	if err != nil || found && !c.State.usable(head) || startOver {
		c.State = fresh()
	}
	c.Summary, c.From = c.State.at()
	c.Summary.New, c.Summary.NewTotal = nil, 0
	return c, nil
}

// fits reports whether a stored summary, and the seq a run would resume
// at, can be true of a log whose last event is head.
func fits(sum Summary, next, head int64) bool {
	return next >= 0 && next <= head+1 && sum.Check(head) == nil
}

// Commit stores the state, holding the summary, as the checkpoint, then
// deletes the parts the stored checkpoint listed and the state no longer
// lists. Only then: a reader that read the previous checkpoint and misses
// one of them reads the new one. The run stores its new parts before: one
// that dies in between leaves parts that nothing lists.
func (c *Checkpoint[S]) Commit(ctx context.Context) error {
	c.State = c.State.withSummary(c.Summary)
	if err := storeJSON(ctx, c.log, c.name, c.State); err != nil {
		return err
	}
	if h, ok := c.State.history(c.From); ok {
		_, next := h.at()
		// Only ever a head start for a fork: one not stored is not an
		// error of the run's.
		_ = storeJSON(ctx, c.log, historyName(c.dir, next), h)
	}
	deleteUnlisted(ctx, c.log, c.dir, c.listed, c.State.parts())
	c.listed = c.State.parts()
	_, c.From = c.State.at()
	return nil
}

// HistoryDir holds, under a kind's directory, the checkpoints its runs
// kept along the Session's history, each named by its Next: where a
// fork's child cut in the middle of the history starts from (SeedFork).
// They are never written over and go with the Session.
const HistoryDir = "history"

func historyName(dir string, next int64) string {
	return fmt.Sprintf("%s/%s/%020d.json", dir, HistoryDir, next)
}

// maxCheckpointBytes caps a checkpoint read. A real one is a few KiB (its
// lists are bounded above); a forged one of megabytes of numbers would
// decode into many times its size.
const maxCheckpointBytes = 64 << 10

// loadState reads the checkpoint name into s: one that does not decode,
// or whose state does not check out, is unusable. found is false when it
// is absent.
func loadState[S state[S]](ctx context.Context, log Log, name string, s *S) (found bool, err error) {
	data, err := log.GetDerived(ctx, name, maxCheckpointBytes)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", name, err)
	}
	if err := json.Unmarshal(data, s); err != nil {
		return false, fmt.Errorf("read %s: %w: %w", name, ErrUnusable, err)
	}
	if err := (*s).check(); err != nil {
		return true, fmt.Errorf("read %s: %w: %w", name, ErrUnusable, err)
	}
	return true, nil
}

func storeJSON(ctx context.Context, log Log, name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	if err := log.PutDerived(ctx, name, data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
