package worker

import (
	"context"
	"errors"
	"fmt"

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
// checkpoint says where the runs got to and which tool calls are still
// open, and the parts they stored chain from seq 0 to it (each part starts
// after the previous one's last turn/end). A part stored by a run that died before its checkpoint is
// ignored, as the next run will write it again. Before the first replayed
// turn it returns a *NotReplayedError.
func LoadTranscript(ctx context.Context, log Log, target turnlog.Adapter) (Transcript, error) {
	dir := replayDir(target)
	var state replayState
	found, err := loadCheckpoint(ctx, log, dir+"/checkpoint.json", &state)
	if err != nil {
		return Transcript{}, err
	}
	if !found || state.Next == 0 {
		return Transcript{}, &NotReplayedError{Want: -1, Through: -1}
	}
	out := Transcript{
		Result:      replay.Result{ThroughSeq: -1, Messages: []replay.Message{}},
		Diagnostics: []replay.Diagnostic{},
	}
	for from := int64(0); from < state.Next; {
		var part Transcript
		name := segmentName(dir, from)
		found, err := loadJSON(ctx, log, name, &part)
		if err != nil {
			return Transcript{}, err
		}
		if !found || part.ThroughSeq < from {
			return Transcript{}, fmt.Errorf("read %s: the stored transcript has no part for seq %d (replayed through seq %d)", name, from, state.Next-1)
		}
		out.Messages = append(out.Messages, part.Messages...)
		out.Counts.Add(part.Counts)
		out.Diagnostics = append(out.Diagnostics, part.Diagnostics...)
		out.ThroughSeq = part.ThroughSeq
		from = part.ThroughSeq + 1
	}
	// The last turn's open tool calls may still be answered by the next
	// turn; until then the transcript ends with their synthetic results.
	out.Messages = append(out.Messages, state.Open.Unanswered()...)
	return out, nil
}
