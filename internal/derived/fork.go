package derived

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// A fork's child holds its source's events through the cut, so whatever the
// source derived from events before the cut holds for the child too: a
// source checkpoint that reaches no further than the cut is a checkpoint
// of the child, and the child's first runs fold only the events after it
// instead of the whole prefix. (A split of the log at any turn boundary
// gives the same derived data as one run over the whole log:
// internal/worker's TestReplayRunsEqualAWholeReplayOverEverySplit.)
//
// The source keeps checkpoints along its history (HistoryDir), so one is
// near any cut, and the transcript's final parts, which no run of the
// source's merges again, are shared rather than copied: the child's
// checkpoint names the Session that holds them (PartRef.Session), whose
// deletion keeps them while a child's pin is there.

// Seeded says which of a fork child's derived data SeedFork started from
// its source's, from where, and what it cost.
type Seeded struct {
	// Assembly and Transcript are the seqs the child's assembly and
	// replay resume at; -1 for data not seeded.
	Assembly, Transcript int64
	// SharedParts are the transcript parts the child shares with the
	// Sessions that hold them; CopiedParts and CopiedBytes those copied
	// into its own derived data.
	SharedParts, CopiedParts int
	CopiedBytes              int64
}

// SeedFork starts dst's derived data from src's, for a child of src cut at
// seq cut: the assembly checkpoint, and the transcript for target, each
// from the last checkpoint src has (its head one or one it kept along its
// history) that reaches no further than the cut, when dst has none yet.
// The transcript's final parts held by a Session that shares says the
// child may share (one whose data the child's pins keep) are shared; its
// other parts are copied inside the store. The checkpoints are written as
// they were read (the transcript's with where each part is), after the
// parts: a source run that moves its checkpoint on meanwhile cannot hand
// the child one past the cut. A part that a
// source run merged away meanwhile is looked for again under the source's
// new checkpoint; after that, the child replays from the start.
// transcript false seeds assembly alone (a child whose replay of the
// prefix differs from its source's).
//
// Seeding is only ever a head start: what is not seeded the child's runs
// derive from its log, and what is seeded they check as any checkpoint.
func SeedFork(ctx context.Context, src, dst StoreLog, cut int64, target turnlog.Adapter, transcript bool, shares func(session, uid string) bool) (Seeded, error) {
	seeded := Seeded{Assembly: -1, Transcript: -1}
	var asm AssemblyState
	data, ok, err := seedable(ctx, src, dst, AssemblyCheckpointName, AssemblyDir, cut, &asm, nil)
	if err != nil {
		return seeded, err
	}
	if ok {
		if err := dst.PutDerived(ctx, AssemblyCheckpointName, data); err != nil {
			return seeded, err
		}
		seeded.Assembly = asm.Next
	}
	if !transcript {
		return seeded, nil
	}
	dir := TranscriptDir(target)
	for range loadAttempts {
		var rs ReplayState
		_, ok, err := seedable(ctx, src, dst, ReplayCheckpointName(target), dir, cut, &rs, livePrefix)
		if err != nil || !ok {
			return seeded, err
		}
		s := seeded
		rs.Parts, err = childParts(ctx, src, dst, dir, rs.Parts, shares, &s)
		if errors.Is(err, ErrNotFound) {
			continue // merged away: the source's newer checkpoint lists its parts
		}
		if err != nil {
			return seeded, err
		}
		if err := storeJSON(ctx, dst, ReplayCheckpointName(target), rs); err != nil {
			return seeded, err
		}
		s.Transcript = rs.Next
		return s, nil
	}
	return seeded, nil
}

// seedable reads into s the checkpoint the child can start from
// (lastCheckpoint at the cut) and returns its bytes; none when dst has a
// checkpoint of its own.
func seedable[S state[S]](ctx context.Context, src, dst StoreLog, name, dir string, cut int64, s *S, fresh func(kept, head S) bool) ([]byte, bool, error) {
	if _, err := dst.GetDerived(ctx, name, maxCheckpointBytes); err == nil || !errors.Is(err, ErrNotFound) {
		return nil, false, ignoreUnusable(err) // the child has its own
	}
	return lastCheckpoint(ctx, src, name, dir, cut, s, fresh)
}

// lastCheckpoint reads into s, of log's checkpoint name and those kept in
// dir's HistoryDir, the last that is usable in a log whose head is seq,
// and returns its bytes. A kept one must also pass fresh, given the head
// checkpoint (nil: any does).
func lastCheckpoint[S state[S]](ctx context.Context, log StoreLog, name, dir string, seq int64, s *S, fresh func(kept, head S) bool) ([]byte, bool, error) {
	var head S
	data, err := log.GetDerived(ctx, name, maxCheckpointBytes)
	switch {
	case errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnusable):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read %s: %w", name, err)
	case json.Unmarshal(data, &head) != nil || head.check() != nil:
		return nil, false, nil
	case head.usable(seq):
		*s = head
		return data, true, nil
	}
	kept, err := log.ListDerived(ctx, path.Join(dir, HistoryDir))
	if err != nil {
		return nil, false, fmt.Errorf("read the kept checkpoints: %w", err)
	}
	// The last kept one at or before seq: names are their Next,
	// zero-padded, so the listing is in seq order.
	for i := len(kept) - 1; i >= 0; i-- {
		next, ok := historyNext(kept[i])
		if !ok || next > seq+1 {
			continue
		}
		data, err := log.GetDerived(ctx, kept[i], maxCheckpointBytes)
		if err != nil {
			return nil, false, ignoreUnusable(ignoreNotFound(err))
		}
		var k S
		if json.Unmarshal(data, &k) != nil || k.check() != nil || !k.usable(seq) || (fresh != nil && !fresh(k, head)) {
			return nil, false, nil
		}
		*s = k
		return data, true, nil
	}
	return nil, false, nil
}

// historyNext is the Next a kept checkpoint's name says it ends at.
func historyNext(name string) (int64, bool) {
	base, ok := strings.CutSuffix(path.Base(name), ".json")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(base, 10, 64)
	return n, err == nil && n >= 0
}

// livePrefix: a kept transcript checkpoint is only as good as its parts,
// which a rewrite of the transcript (a compaction, an edit) drops when no
// child shared them: its parts must be where the head checkpoint's are.
func livePrefix(kept, head ReplayState) bool {
	if len(kept.Parts) > len(head.Parts) {
		return false
	}
	for i, p := range kept.Parts {
		if p != head.Parts[i] {
			return false
		}
	}
	return true
}

// childParts lists refs, the parts of src's transcript in dir, as the
// child's: each final part whose holder the child may share is shared,
// every other is copied into dst's derived data, inside the store.
func childParts(ctx context.Context, src, dst StoreLog, dir string, refs []PartRef, shares func(session, uid string) bool, s *Seeded) ([]PartRef, error) {
	out := make([]PartRef, len(refs))
	final := finalParts(refs)
	srcLoc := src.Log.Location()
	for i, ref := range refs {
		holder := ref
		if !ref.shared() {
			holder.Session, holder.UID = srcLoc.Session, srcLoc.UID
		}
		if i < final && shares != nil && shares(holder.Session, holder.UID) {
			out[i] = holder
			s.SharedParts++
			continue
		}
		from, err := ref.holder(src)
		if err != nil {
			return nil, err
		}
		if err := dst.CopyDerivedFrom(ctx, from.(StoreLog), ref.Name(dir)); err != nil {
			return nil, err
		}
		ref.Session, ref.UID = "", ""
		out[i] = ref
		s.CopiedParts++
		s.CopiedBytes += ref.Bytes
	}
	return out, nil
}

func ignoreNotFound(err error) error {
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// ignoreUnusable: an unusable checkpoint of the child's is its runs' to
// replace, not a reason to fail the fork.
func ignoreUnusable(err error) error {
	if errors.Is(err, ErrUnusable) {
		return nil
	}
	return err
}
