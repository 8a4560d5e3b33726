package worker

import (
	"context"
	"fmt"

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
	return AssembleWith(ctx, log, AssembleOptions{})
}

// AssembleWith is Assemble, exporting the turns it commits as spans when
// the process exports traces (traces.go).
func AssembleWith(ctx context.Context, log derived.Log, opts AssembleOptions) (derived.Summary, error) {
	ck, err := derived.OpenAssembly(ctx, log)
	if err != nil {
		return derived.Summary{}, err
	}
	if ck.Head <= ck.Summary.ScannedThrough {
		return ck.Summary, nil
	}
	r := &assemblyRun{ctx: ctx, ck: ck, a: assembler.New(ck.State.SessionAdapter), committed: emptyResult(),
		trace: opts.turnTrace(ctx, log, prevTurnEnd(ck.Summary))}
	for e, err := range log.Events(ctx, ck.From) {
		if err != nil {
			return derived.Summary{}, fmt.Errorf("read the log: %w", err)
		}
		if err := r.take(&e); err != nil {
			return derived.Summary{}, err
		}
	}
	if ck.Summary.ScannedThrough < ck.Head {
		// A log only grows, so the events through the head read above
		// must all be there; a shorter read is a log with objects
		// missing, and a summary of it would be taken for the whole.
		return derived.Summary{}, fmt.Errorf("read the log: it ended at seq %d, before seq %d, its head when this run began", ck.Summary.ScannedThrough, ck.Head)
	}
	if err := r.commit(); err != nil {
		return derived.Summary{}, err
	}
	return ck.Summary, nil
}

// assemblyRun is one assembly run's state: its checkpoint, which it
// folds the events into, and what it assembled since the last commit.
type assemblyRun struct {
	ctx context.Context
	ck  *derived.AssemblyCheckpoint
	a   *assembler.Assembler

	// committed are the outputs of the turns ended since the checkpoint's
	// From, the first seq of the segment they are stored in; open those of
	// the turn still streaming; read the event bytes behind committed.
	committed, open assembler.Result
	openTurn        bool
	read            int
	trace           *turnTrace
	// counting counts the messages of the events since the last
	// turn/end, for the state's Prefix.
	counting assembler.MessageCount
}

// emptyResult is a Result that encodes its lists as [], not null.
func emptyResult() assembler.Result {
	return assembler.Result{Messages: []assembler.Assembled{}, Partials: []assembler.Partial{}, Diagnostics: []assembler.Diagnostic{}}
}

// take assembles one event.
func (r *assemblyRun) take(e *turnlog.Event) error {
	r.ck.Summary.ScannedThrough = e.Seq
	r.read += len(e.Raw)
	r.counting.Add(e)
	r.trace.add(e)
	out := r.a.Add(e)
	if out.Message != nil {
		r.open.Messages = append(r.open.Messages, *out.Message)
	}
	r.open.Partials = append(r.open.Partials, out.Partials...)
	r.open.Diagnostics = append(r.open.Diagnostics, out.Diagnostics...)
	switch e.Type {
	case turnlog.TypeSessionStart:
		p, _ := e.SessionStart()
		r.ck.State.SessionAdapter = p.Adapter
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
	state, sum := &r.ck.State, &r.ck.Summary
	r.openTurn = false
	state.CommittedTurns++
	state.Next = e.Seq + 1
	if p := state.Prefix; p != nil {
		if p.FirstTurn == 0 {
			p.FirstTurn = e.Turn
		}
		p.Messages += r.counting.Total()
	}
	r.counting = assembler.MessageCount{}
	sum.ThroughSeq = e.Seq
	sum.LastTurnEnd = &derived.TurnEnd{Seq: e.Seq, Turn: e.Turn, Reason: end.Reason}
	r.committed.Messages = append(r.committed.Messages, r.open.Messages...)
	r.committed.Partials = append(r.committed.Partials, r.open.Partials...)
	r.committed.Diagnostics = append(r.committed.Diagnostics, r.open.Diagnostics...)
	for _, d := range r.open.Diagnostics {
		switch d.Code {
		case assembler.CodeEnvelopeMisaligned:
			sum.EnvelopesDiscarded++
			sum.Note(derived.Diagnostic{Seq: d.Seq, Cause: d.Code, Message: d.Message})
		case assembler.CodeMessageTooLarge:
			sum.Note(derived.Diagnostic{Seq: d.Seq, Cause: d.Code, Message: d.Message})
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
	r.read = 0
	return nil
}

// commit stores the turns committed since the last commit, then the
// checkpoint.
func (r *assemblyRun) commit() error {
	if err := r.ck.StoreSegment(r.ctx, r.committed); err != nil {
		return err
	}
	r.ck.Summary.Turns = r.ck.State.CommittedTurns
	if r.openTurn {
		r.ck.Summary.Turns++
	}
	if err := r.ck.Commit(r.ctx); err != nil {
		return err
	}
	r.trace.committed(r.ctx)
	return nil
}
