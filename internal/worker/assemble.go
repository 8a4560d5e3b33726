package worker

import (
	"context"
	"errors"
	"fmt"
	"github.com/turnlog/turnlog/internal/derived"
	"io"

	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// maxAssemblyPartBytes is how much of the log (in event bytes) a run
// assembles before it stores what it has and a checkpoint: a first run
// over a log of gigabytes holds a few MiB of output at a time, not all of
// it, and a run that dies keeps what it stored. (At 4 MiB a part the
// output and its encoding took 31 MiB of heap, at 1 MiB 13 MiB:
// TestReadersStayBounded.)
const maxAssemblyPartBytes = 1 << 20

// Assemble assembles the responses of the turns that ended since the last
// run, into one derived object per run (or per maxAssemblyPartBytes of the
// log read), and records where the log's head, turns and last turn/end
// are. It does nothing when the head has not moved.
func Assemble(ctx context.Context, log derived.Log) (derived.Summary, error) {
	fresh := derived.AssemblyState{Summary: derived.Summary{Task: derived.TaskAssemble, ThroughSeq: -1, ScannedThrough: -1}}
	state := fresh
	found, err := derived.LoadCheckpoint(ctx, log, derived.AssemblyCheckpoint, &state)
	if err != nil && !errors.Is(err, derived.ErrUnusable) {
		return derived.Summary{}, err
	}
	head, herr := log.Head(ctx)
	if herr != nil {
		return derived.Summary{}, fmt.Errorf("find the log's head: %w", herr)
	}
	if err := derived.Resumable(err, found, state.Summary, state.Next, head); err != nil {
		state = fresh // derived data: assemble the log again
	}
	sum := state.Summary
	sum.New, sum.NewTotal = nil, 0
	if head <= sum.ScannedThrough {
		return sum, nil
	}

	events, err := log.Events(ctx, state.Next)
	if err != nil {
		return derived.Summary{}, fmt.Errorf("read the log from seq %d: %w", state.Next, err)
	}
	defer events.Close()

	a := assembler.New(state.SessionAdapter)
	committed := assembler.Result{Messages: []assembler.Assembled{}, Partials: []assembler.Partial{}, Diagnostics: []assembler.Diagnostic{}}
	var open assembler.Result // outputs of the turn still streaming
	from, openTurn := state.Next, false
	read := 0 // event bytes behind committed
	// commit stores the committed turns since from and a checkpoint.
	commit := func() error {
		if state.Next > from {
			// Written before the checkpoint: a run that dies in between
			// leaves a segment the next run rewrites under the same name.
			if err := derived.StoreJSON(ctx, log, derived.SegmentName(derived.AssemblyDir, from), committed); err != nil {
				return err
			}
		}
		sum.Turns = state.CommittedTurns
		if openTurn {
			sum.Turns++
		}
		state.Summary = sum
		return derived.StoreJSON(ctx, log, derived.AssemblyCheckpoint, state)
	}
	for {
		e, err := events.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return derived.Summary{}, fmt.Errorf("read the log: %w", err)
		}
		sum.ScannedThrough = e.Seq
		read += len(e.Raw)
		out := a.Add(&e)
		if out.Message != nil {
			open.Messages = append(open.Messages, *out.Message)
		}
		open.Partials = append(open.Partials, out.Partials...)
		open.Diagnostics = append(open.Diagnostics, out.Diagnostics...)
		switch e.Type {
		case turnlog.TypeSessionStart:
			p, _ := e.SessionStart()
			state.SessionAdapter = p.Adapter
		case turnlog.TypeTurnStart:
			openTurn = true
		case turnlog.TypeTurnEnd:
			end, _ := e.TurnEnd()
			openTurn = false
			state.CommittedTurns++
			state.Next = e.Seq + 1
			sum.ThroughSeq = e.Seq
			sum.LastTurnEnd = &derived.TurnEnd{Seq: e.Seq, Turn: e.Turn, Reason: end.Reason}
			committed.Messages = append(committed.Messages, open.Messages...)
			committed.Partials = append(committed.Partials, open.Partials...)
			committed.Diagnostics = append(committed.Diagnostics, open.Diagnostics...)
			for _, d := range open.Diagnostics {
				switch d.Code {
				case assembler.CodeEnvelopeMisaligned:
					sum.EnvelopesDiscarded++
					sum.Note(derived.Diagnostic{Seq: d.Seq, Cause: d.Code, Message: d.Message})
				case assembler.CodeMessageTooLarge:
					sum.Note(derived.Diagnostic{Seq: d.Seq, Cause: d.Code, Message: d.Message})
				}
			}
			open = assembler.Result{}
			if read >= maxAssemblyPartBytes {
				if err := commit(); err != nil {
					return derived.Summary{}, err
				}
				committed = assembler.Result{Messages: []assembler.Assembled{}, Partials: []assembler.Partial{}, Diagnostics: []assembler.Diagnostic{}}
				from, read = state.Next, 0
			}
		}
	}
	if sum.ScannedThrough < head {
		// A log only grows, so the events through the head read above
		// must all be there; a shorter read is a log with objects
		// missing, and a summary of it would be taken for the whole.
		return derived.Summary{}, fmt.Errorf("read the log: it ended at seq %d, before seq %d, its head when this run began", sum.ScannedThrough, head)
	}
	if err := commit(); err != nil {
		return derived.Summary{}, err
	}
	return sum, nil
}
