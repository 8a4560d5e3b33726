package worker

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/derived"
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
	r := &assemblyRun{ctx: ctx, log: log}
	head, err := r.start()
	if err != nil || head <= r.sum.ScannedThrough {
		return r.sum, err
	}
	events, err := log.Events(ctx, r.state.Next)
	if err != nil {
		return derived.Summary{}, fmt.Errorf("read the log from seq %d: %w", r.state.Next, err)
	}
	defer events.Close()
	for {
		e, err := events.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return derived.Summary{}, fmt.Errorf("read the log: %w", err)
		}
		if err := r.take(&e); err != nil {
			return derived.Summary{}, err
		}
	}
	if r.sum.ScannedThrough < head {
		// A log only grows, so the events through the head read above
		// must all be there; a shorter read is a log with objects
		// missing, and a summary of it would be taken for the whole.
		return derived.Summary{}, fmt.Errorf("read the log: it ended at seq %d, before seq %d, its head when this run began", r.sum.ScannedThrough, head)
	}
	if err := r.commit(); err != nil {
		return derived.Summary{}, err
	}
	return r.sum, nil
}

// assemblyRun is one assembly run's state.
type assemblyRun struct {
	ctx context.Context
	log derived.Log
	a   *assembler.Assembler

	// state is the checkpoint as far as the run has got; sum the summary
	// it returns, with this run's new diagnostics.
	state derived.AssemblyState
	sum   derived.Summary
	// committed are the outputs of the turns ended since from, the first
	// seq of the segment they are stored in; open those of the turn still
	// streaming; read the event bytes behind committed.
	committed, open assembler.Result
	from            int64
	openTurn        bool
	read            int
}

// start loads the checkpoint the run resumes from (a fresh one when it
// cannot be believed) and returns the log's head.
func (r *assemblyRun) start() (head int64, err error) {
	fresh := derived.AssemblyState{Summary: derived.Summary{Task: derived.TaskAssemble, ThroughSeq: -1, ScannedThrough: -1}}
	r.state = fresh
	found, err := derived.LoadCheckpoint(r.ctx, r.log, derived.AssemblyCheckpoint, &r.state)
	if err != nil && !errors.Is(err, derived.ErrUnusable) {
		return 0, err
	}
	head, herr := r.log.Head(r.ctx)
	if herr != nil {
		return 0, fmt.Errorf("find the log's head: %w", herr)
	}
	if err := derived.Resumable(err, found, r.state.Summary, r.state.Next, head); err != nil {
		r.state = fresh // derived data: assemble the log again
	}
	r.sum = r.state.Summary
	r.sum.New, r.sum.NewTotal = nil, 0
	r.a = assembler.New(r.state.SessionAdapter)
	r.committed = emptyResult()
	r.from = r.state.Next
	return head, nil
}

// emptyResult is a Result that encodes its lists as [], not null.
func emptyResult() assembler.Result {
	return assembler.Result{Messages: []assembler.Assembled{}, Partials: []assembler.Partial{}, Diagnostics: []assembler.Diagnostic{}}
}

// take assembles one event.
func (r *assemblyRun) take(e *turnlog.Event) error {
	r.sum.ScannedThrough = e.Seq
	r.read += len(e.Raw)
	out := r.a.Add(e)
	if out.Message != nil {
		r.open.Messages = append(r.open.Messages, *out.Message)
	}
	r.open.Partials = append(r.open.Partials, out.Partials...)
	r.open.Diagnostics = append(r.open.Diagnostics, out.Diagnostics...)
	switch e.Type {
	case turnlog.TypeSessionStart:
		p, _ := e.SessionStart()
		r.state.SessionAdapter = p.Adapter
	case turnlog.TypeTurnStart:
		r.openTurn = true
	case turnlog.TypeTurnEnd:
		return r.endTurn(e)
	}
	return nil
}

// endTurn commits the turn that e ends, and stores what the run has
// committed once it has read maxAssemblyPartBytes.
func (r *assemblyRun) endTurn(e *turnlog.Event) error {
	end, _ := e.TurnEnd()
	r.openTurn = false
	r.state.CommittedTurns++
	r.state.Next = e.Seq + 1
	r.sum.ThroughSeq = e.Seq
	r.sum.LastTurnEnd = &derived.TurnEnd{Seq: e.Seq, Turn: e.Turn, Reason: end.Reason}
	r.committed.Messages = append(r.committed.Messages, r.open.Messages...)
	r.committed.Partials = append(r.committed.Partials, r.open.Partials...)
	r.committed.Diagnostics = append(r.committed.Diagnostics, r.open.Diagnostics...)
	for _, d := range r.open.Diagnostics {
		switch d.Code {
		case assembler.CodeEnvelopeMisaligned:
			r.sum.EnvelopesDiscarded++
			r.sum.Note(derived.Diagnostic{Seq: d.Seq, Cause: d.Code, Message: d.Message})
		case assembler.CodeMessageTooLarge:
			r.sum.Note(derived.Diagnostic{Seq: d.Seq, Cause: d.Code, Message: d.Message})
		}
	}
	r.open = assembler.Result{}
	if r.read < maxAssemblyPartBytes {
		return nil
	}
	if err := r.commit(); err != nil {
		return err
	}
	r.committed = emptyResult()
	r.from, r.read = r.state.Next, 0
	return nil
}

// commit stores the committed turns since from and a checkpoint.
func (r *assemblyRun) commit() error {
	if r.state.Next > r.from {
		// Written before the checkpoint: a run that dies in between
		// leaves a segment the next run rewrites under the same name.
		if err := derived.StoreJSON(r.ctx, r.log, derived.SegmentName(derived.AssemblyDir, r.from), r.committed); err != nil {
			return err
		}
	}
	r.sum.Turns = r.state.CommittedTurns
	if r.openTurn {
		r.sum.Turns++
	}
	r.state.Summary = r.sum
	return derived.StoreJSON(r.ctx, r.log, derived.AssemblyCheckpoint, r.state)
}
