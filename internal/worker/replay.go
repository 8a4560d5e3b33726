package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// replayDir is where the transcript for target is kept. Each target has its
// own, so a Session whose spec.adapter changes starts a new transcript and
// never mixes messages replayed for two targets.
func replayDir(target turnlog.Adapter) string {
	sum := sha256.Sum256([]byte(target.Kind + "\x00" + target.API + "\x00" + target.Provider + "\x00" + target.Model))
	return "replay/" + hex.EncodeToString(sum[:8])
}

// replayState is the checkpoint replay resumes from.
type replayState struct {
	Summary Summary `json:"summary"`
	// Next is the first seq after the last replayed turn/end.
	Next int64 `json:"next"`
	// Open are the tool calls of the transcript's last assistant message
	// that the next turn may still answer. The transcript is the segments'
	// messages followed by Open.Unanswered().
	Open replay.OpenCalls `json:"open,omitzero"`
}

// Replay extends the transcript for target through the last turn that has
// ended, one derived object per run. A turn's messages enter the transcript
// only at its turn/end (a host may still write its own assistant message
// before that), so a run stops at the last turn/end and the turn still
// streaming waits for the next run.
//
// A run stops with the tool calls of the last assistant message still open
// and keeps them in the checkpoint: their results may come in the next turn
// (a toolUse turn is answered by the next one). The next run settles them
// where a replay of the whole log does, so the segments of any sequence of
// runs, followed by the synthetic results of the calls still open, are the
// whole log's transcript byte for byte.
func Replay(ctx context.Context, log Log, target turnlog.Adapter) (Summary, error) {
	dir := replayDir(target)
	// A function, as the checkpoint is decoded into the counts it points to.
	fresh := func() replayState {
		return replayState{Summary: Summary{Task: TaskReplay, ThroughSeq: -1, Replay: &ReplayCounts{Target: target}}}
	}
	state := fresh()
	found, err := loadCheckpoint(ctx, log, dir+"/checkpoint.json", &state)
	if err != nil && !errors.Is(err, ErrUnusable) {
		return Summary{}, err
	}
	head, herr := log.Head(ctx)
	if herr != nil {
		return Summary{}, fmt.Errorf("find the log's head: %w", herr)
	}
	if err := resumable(err, found, state.Summary, state.Next, head); err != nil || state.Summary.Replay == nil {
		state = fresh() // derived data: replay the log again
	}
	sum := state.Summary
	sum.New, sum.NewTotal = nil, 0
	counts := *sum.Replay
	counts.DegradedSeqs = cloneSeqs(counts.DegradedSeqs)

	events, err := log.Events(ctx, state.Next)
	if err != nil {
		return Summary{}, fmt.Errorf("read the log from seq %d: %w", state.Next, err)
	}
	defer events.Close()

	var degraded []replay.Diagnostic
	var b *replay.Builder
	var turn []turnlog.Event // events since the last turn/end
	from := state.Next
	for {
		e, err := events.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Summary{}, fmt.Errorf("read the log: %w", err)
		}
		if from == 0 && e.Seq == 0 {
			if p, ok := e.SessionStart(); ok {
				counts.Target = defaultAdapter(counts.Target, p.Adapter)
			}
		}
		turn = append(turn, e)
		if e.Type != turnlog.TypeTurnEnd {
			continue
		}
		if b == nil {
			b = replay.NewBuilder(replay.Options{Target: counts.Target, Through: replay.Head, Open: state.Open,
				OnDegrade: func(d replay.Diagnostic) { degraded = append(degraded, d) }})
		}
		for i := range turn {
			b.Add(&turn[i])
		}
		turn = turn[:0]
		state.Next = e.Seq + 1
		sum.ThroughSeq = e.Seq
	}
	if b == nil {
		return sum, nil // no turn ended since the last run
	}
	res, open := b.Checkpoint()
	state.Open = open
	counts.Native += int64(res.Counts.Native)
	counts.Foreign += int64(res.Counts.Foreign)
	counts.Degraded += int64(res.Counts.Degraded)
	counts.OrphanToolResults += int64(res.Counts.OrphanToolResults)
	for _, d := range degraded {
		cause := string(d.Cause)
		if len(counts.DegradedSeqs[cause]) < MaxSeqsPerCause {
			if counts.DegradedSeqs == nil {
				counts.DegradedSeqs = map[string][]int64{}
			}
			counts.DegradedSeqs[cause] = append(counts.DegradedSeqs[cause], d.Seq)
		}
		sum.note(Diagnostic{Seq: d.Seq, Cause: cause, Message: d.Message})
	}
	sum.Replay = &counts
	if err := storeJSON(ctx, log, segmentName(dir, from), Transcript{Result: res, Diagnostics: degraded}); err != nil {
		return Summary{}, err
	}
	state.Summary = sum
	if err := storeJSON(ctx, log, dir+"/checkpoint.json", state); err != nil {
		return Summary{}, err
	}
	return sum, nil
}

// defaultAdapter fills the fields target leaves empty from the session's
// adapter, as replay does with a session/start event.
func defaultAdapter(target, session turnlog.Adapter) turnlog.Adapter {
	for _, f := range []struct {
		dst *string
		src string
	}{
		{&target.Kind, session.Kind}, {&target.API, session.API},
		{&target.Provider, session.Provider}, {&target.Model, session.Model},
	} {
		if *f.dst == "" {
			*f.dst = f.src
		}
	}
	return target
}

func cloneSeqs(m map[string][]int64) map[string][]int64 {
	if m == nil {
		return nil
	}
	out := make(map[string][]int64, len(m))
	for k, v := range m {
		out[k] = append([]int64(nil), v...)
	}
	return out
}
