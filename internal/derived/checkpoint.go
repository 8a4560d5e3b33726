package derived

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// maxCheckpointBytes caps a checkpoint read. A real one is a few KiB (its
// lists are bounded above); a forged one of megabytes of numbers would
// decode into many times its size.
const maxCheckpointBytes = 64 << 10

// LoadCheckpoint reads a checkpoint into v; found is false when it is
// absent.
func LoadCheckpoint(ctx context.Context, log Log, name string, v any) (found bool, err error) {
	data, err := log.GetDerived(ctx, name, maxCheckpointBytes)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", name, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("read %s: %w: %w", name, ErrUnusable, err)
	}
	return true, nil
}

// Resumable reports whether a checkpoint load left a state a run can
// resume from: nil when it did or when there was none; an error wrapping
// ErrUnusable when the checkpoint is there but not believable, and the run
// starts over instead. Any other error (the store failing) is returned as
// it is and fails the run.
func Resumable(loadErr error, found bool, sum Summary, next, head int64) error {
	switch {
	case loadErr != nil:
		return loadErr
	case !found:
		return nil
	case next < 0 || next > head+1:
		return fmt.Errorf("%w: %s checkpoint resumes at seq %d, the log's head is seq %d", ErrUnusable, sum.Task, next, head)
	}
	if err := sum.Check(head); err != nil {
		return fmt.Errorf("%w: %w", ErrUnusable, err)
	}
	return nil
}

func StoreJSON(ctx context.Context, log Log, name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	if err := log.PutDerived(ctx, name, data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
