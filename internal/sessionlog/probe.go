package sessionlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/turnlog/turnlog/internal/store"
)

// Grown reports whether the log holds an event at seq next, with one
// attributes request for the one key that must exist if it does: every
// append, by any writer, creates the segment named by the seq it starts at,
// and that seq is the log's next. So a log whose next seq was next has
// grown exactly when the segment "next" exists, however many segments the
// log has, and no listing is needed to find out.
func (l *Log) Grown(ctx context.Context, next int64) (bool, error) {
	if next < 0 {
		return false, fmt.Errorf("probe %s: invalid next seq %d", l.loc, next)
	}
	err := retry(ctx, func() error {
		_, err := l.b.Attributes(ctx, l.segmentKey(next))
		return err
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("probe %s at seq %d: %w", l.loc, next, err)
}
