package derived

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// A fork's child holds its source's events through the cut, so whatever the
// source derived from events before the cut holds for the child too: a
// source checkpoint that reaches no further than the cut is a checkpoint
// of the child, and the child's first runs fold only the events after it
// instead of the whole prefix. (A split of the log at any turn boundary
// gives the same derived data as one run over the whole log:
// internal/worker's TestReplayRunsEqualAWholeReplayOverEverySplit.)

// Seeded says which of a fork child's derived data SeedFork started from
// its source's, and from where.
type Seeded struct {
	// Assembly and Transcript are the seqs the child's assembly and
	// replay resume at; -1 for data not seeded.
	Assembly, Transcript int64
}

// SeedFork starts dst's derived data from src's, for a child of src cut at
// seq cut: the assembly checkpoint, and the transcript for target (its
// checkpoint and the parts it lists, copied inside the store), each when
// src has one that reaches no further than the cut and dst has none yet.
// The checkpoints are written as they were read, after the parts: a
// source run that moves its checkpoint on meanwhile cannot hand the child
// one past the cut. A part that a source run merged away meanwhile is
// looked for again under the source's new checkpoint; after that, the
// child replays from the start. transcript false seeds assembly alone (a
// child whose replay of the prefix differs from its source's).
//
// Seeding is only ever a head start: what is not seeded the child's runs
// derive from its log, and what is seeded they check as any checkpoint.
func SeedFork(ctx context.Context, src, dst StoreLog, cut int64, target turnlog.Adapter, transcript bool) (Seeded, error) {
	seeded := Seeded{Assembly: -1, Transcript: -1}
	var asm AssemblyState
	data, ok, err := seedable(ctx, src, dst, AssemblyCheckpointName, cut, &asm)
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
	for range loadAttempts {
		var rs ReplayState
		data, ok, err := seedable(ctx, src, dst, ReplayCheckpointName(target), cut, &rs)
		if err != nil || !ok {
			return seeded, err
		}
		err = copyParts(ctx, src, dst, TranscriptDir(target), rs.Parts)
		if errors.Is(err, ErrNotFound) {
			continue // merged away: the source's newer checkpoint lists its parts
		}
		if err != nil {
			return seeded, err
		}
		if err := dst.PutDerived(ctx, ReplayCheckpointName(target), data); err != nil {
			return seeded, err
		}
		seeded.Transcript = rs.Next
		return seeded, nil
	}
	return seeded, nil
}

// seedable reads src's checkpoint name into s and returns its bytes when
// the child can start from it: a usable checkpoint that reaches no further
// than cut, where dst has none.
func seedable[S state[S]](ctx context.Context, src, dst StoreLog, name string, cut int64, s *S) ([]byte, bool, error) {
	if _, err := dst.GetDerived(ctx, name, maxCheckpointBytes); err == nil || !errors.Is(err, ErrNotFound) {
		return nil, false, ignoreUnusable(err) // the child has its own
	}
	data, err := src.GetDerived(ctx, name, maxCheckpointBytes)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnusable) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the source's %s: %w", name, err)
	}
	if json.Unmarshal(data, s) != nil || (*s).check() != nil || !(*s).usable(cut) {
		return nil, false, nil
	}
	return data, true, nil
}

// ignoreUnusable: an unusable checkpoint of the child's is its runs' to
// replace, not a reason to fail the fork.
func ignoreUnusable(err error) error {
	if errors.Is(err, ErrUnusable) {
		return nil
	}
	return err
}

// copyParts copies the parts refs lists from src's dir to dst's, inside
// the store.
func copyParts(ctx context.Context, src, dst StoreLog, dir string, refs []PartRef) error {
	for _, ref := range refs {
		if err := dst.CopyDerivedFrom(ctx, src, ref.Name(dir)); err != nil {
			return err
		}
	}
	return nil
}
