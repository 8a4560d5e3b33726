package agenthost

import (
	"context"
	"errors"
	"time"

	"github.com/turnlog/turnlog/internal/derived"
)

// Transcript returns the transcript the workers stored for the log's target
// (Log.Target), through the last turn/end they replayed: the messages the
// next request is built from. It reads only what the workers stored, never
// the raw log. Before the first turn is replayed it returns a
// *NotReplayedError (ErrNotReplayed).
func (l *Log) Transcript(ctx context.Context) (Transcript, error) {
	return derived.LoadTranscript(ctx, l.workerLog(), l.target)
}

// pollInterval is how often WaitTranscript looks at the replay checkpoint.
const pollInterval = 200 * time.Millisecond

// WaitTranscript waits until the workers have replayed the log through seq
// (a turn/end's seq, e.g. Head.LastTurnEnd after the host's last turn), then
// returns the transcript. It gives up when ctx is done, with ctx's error
// joined to the *NotReplayedError that says how far replay got.
func (l *Log) WaitTranscript(ctx context.Context, seq int64) (Transcript, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		through := int64(-1)
		sum, found, err := derived.LoadReplay(ctx, l.workerLog(), l.target)
		if err != nil && ctx.Err() == nil {
			return Transcript{}, err
		}
		if found {
			through = sum.ThroughSeq
		}
		if err == nil && through >= seq && through >= 0 {
			tr, err := l.Transcript(ctx)
			// A run may have landed between the two reads: the
			// transcript is then further on, which is just as good.
			if err == nil || !errors.Is(err, ErrNotReplayed) {
				return tr, err
			}
		}
		select {
		case <-ctx.Done():
			return Transcript{}, errors.Join(ctx.Err(), &NotReplayedError{Want: seq, Through: through})
		case <-t.C:
		}
	}
}
