package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// Replay extends the transcript for target through the last event after
// which no turn is open — the last turn/end, or an event between turns that
// follows it. A run stores what it built every pass (passEvents), so what
// it holds does not grow with how far it catches up. A turn's messages enter the
// transcript only at its turn/end (a host may still write its own assistant
// message before that), so a run stops there and the turn still streaming
// waits for the next run.
//
// A run stops with the tool calls of the last assistant message still open
// and keeps them in the checkpoint: their results may come in the next turn
// (a toolUse turn is answered by the next one). The next run settles them
// where a replay of the whole log does, so the segments of any sequence of
// runs, followed by the synthetic results of the calls still open, are the
// whole log's transcript byte for byte.
func Replay(ctx context.Context, log derived.Log, target turnlog.Adapter) (derived.Summary, error) {
	return ReplayWith(ctx, log, target, ReplayOptions{})
}

// ReplayOptions are what a replay run is told besides its target.
type ReplayOptions struct {
	// SentKeptThrough is a fork's cut: the source's host requested the
	// responses through it with every block kept (replay.Options).
	SentKeptThrough int64
}

// ReplayWith is Replay with options.
func ReplayWith(ctx context.Context, log derived.Log, target turnlog.Adapter, o ReplayOptions) (derived.Summary, error) {
	sum, err := replayRun(ctx, log, target, o, false)
	if errors.Is(err, derived.ErrPartsLost) {
		// Derived data: replay the log again into new parts.
		return replayRun(ctx, log, target, o, true)
	}
	return sum, err
}

// replayRun is one run of Replay, from the checkpoint or, with startOver
// or when the checkpoint is unusable, from the start of the log.
func replayRun(ctx context.Context, log derived.Log, target turnlog.Adapter, o ReplayOptions, startOver bool) (derived.Summary, error) {
	ck, err := derived.OpenReplay(ctx, log, target, startOver)
	if err != nil {
		return derived.Summary{}, err
	}
	r := &replayRunner{ctx: ctx, log: log, opts: o, ck: ck, settled: lastTurnEnd(ctx, log)}
	p := r.newPass()
	for e, err := range log.Events(ctx, ck.From) {
		if err != nil {
			return derived.Summary{}, fmt.Errorf("read the log: %w", err)
		}
		full, err := r.take(p, &e)
		if err != nil {
			return derived.Summary{}, err
		}
		if full {
			if err := r.commit(p); err != nil {
				return derived.Summary{}, err
			}
			p = r.newPass()
		}
	}
	if p.b == nil {
		return ck.Summary, nil // no turn ended since the last pass
	}
	return ck.Summary, r.commit(p)
}

// replayRunner is one replay run's state across its passes.
type replayRunner struct {
	ctx  context.Context
	log  derived.Log
	opts ReplayOptions

	// ck is the checkpoint as far as the run has got; its summary is the
	// one the run returns, with this run's new diagnostics.
	ck *derived.ReplayCheckpoint
	// settled is the last turn/end assembly saw (see lastTurnEnd).
	settled int64
	// turn holds the events since the last settled one; inTurn says that
	// a turn has started and not ended.
	turn   []turnlog.Event
	inTurn bool
}

// lastTurnEnd is the last turn/end assembly saw, -1 when it is not known.
// The turns that end by it are known to end: their events go to the
// builder as they come. A turn past it may still be open, so its events
// wait until its turn/end (a run stops at a turn boundary). So the run
// holds at most the events of turns written since the last assembly, never
// a whole huge turn that assembly has already seen end.
func lastTurnEnd(ctx context.Context, log derived.Log) int64 {
	if asm, found, err := derived.LoadAssembly(ctx, log); err == nil && found && asm.LastTurnEnd != nil {
		return asm.LastTurnEnd.Seq
	}
	return -1
}

// replayPass is what one pass builds before it is stored.
type replayPass struct {
	// counts are the run's counts with what the pass replayed added.
	counts derived.ReplayCounts
	// b builds the pass's messages, made when the first event settles.
	b *replay.Builder
	// diags are the diagnostics the builder reported; priorDiags those of
	// the stored parts, when the builder asked for them to rebuild the
	// transcript.
	diags, priorDiags []replay.Diagnostic
	// taken and takenBytes count the events the pass took in.
	taken, takenBytes int
}

// newPass starts a pass from the run's counts so far. A pass takes in
// events until the log ends or, at a point where no turn is open, until it
// has taken in passEvents or passBytes, and is then stored as a run would
// store it: the messages a run holds are bounded by what one pass takes
// in, however much of the log a run catches up with.
func (r *replayRunner) newPass() *replayPass {
	p := &replayPass{counts: *r.ck.Summary.Replay}
	p.counts.DegradedSeqs = cloneSeqs(p.counts.DegradedSeqs)
	p.counts.RefusedSeqs = cloneSeqs(p.counts.RefusedSeqs)
	p.counts.Refused = maps.Clone(p.counts.Refused)
	p.counts.ContextEventSeqs = slices.Clone(p.counts.ContextEventSeqs)
	return p
}

// builder is the pass's replay builder, made on first use.
func (r *replayRunner) builder(p *replayPass) *replay.Builder {
	if p.b != nil {
		return p.b
	}
	// A compaction or a context edit changes messages earlier runs stored:
	// the builder then asks for them, and the run stores the whole
	// transcript anew, with the diagnostics the old parts held.
	var prior func() ([]replay.Message, error)
	if r.ck.State.Next > 0 {
		prior = func() ([]replay.Message, error) {
			msgs, diags, err := r.ck.ReadParts(r.ctx)
			p.priorDiags = diags
			return msgs, err
		}
	}
	var context replay.ContextState
	if r.ck.State.Context != nil {
		context = *r.ck.State.Context
	}
	p.b = replay.NewBuilder(replay.Options{Target: p.counts.Target, Through: replay.Head, Open: r.ck.State.Open, Prior: prior,
		Context: context, Reread: r.reread, SentKeptThrough: r.opts.SentKeptThrough,
		OnDiagnostic: func(d replay.Diagnostic) { p.diags = append(p.diags, d) }})
	return p.b
}

// reread reads the log again for a context event that needs messages the
// stored transcript no longer holds (replay.Options.Reread).
func (r *replayRunner) reread(from int64) turnlog.Events {
	return r.log.Events(r.ctx, from)
}

// take feeds one event to the pass's builder, a turn at a time. It reports
// whether the pass is full: no turn is open and the pass has taken in
// passEvents or passBytes.
func (r *replayRunner) take(p *replayPass, e *turnlog.Event) (full bool, err error) {
	p.taken, p.takenBytes = p.taken+1, p.takenBytes+len(e.Raw)
	if r.ck.From == 0 && e.Seq == 0 {
		if start, ok := e.SessionStart(); ok {
			p.counts.Target = defaultAdapter(p.counts.Target, start.Adapter)
		}
	}
	if e.Seq == r.settled && e.Type != turnlog.TypeTurnEnd {
		return false, fmt.Errorf("%w: the assembly checkpoint's last turn/end, seq %d, is a %s in the log", derived.ErrUnusable, r.settled, e.Type)
	}
	if e.Seq <= r.settled {
		r.builder(p).Add(e)
	} else {
		r.turn = append(r.turn, *e)
	}
	// A turn's messages are settled at its turn/end; an event between
	// turns (a compaction after a turn, a system message) is settled as
	// it comes.
	switch e.Type {
	case turnlog.TypeTurnStart:
		r.inTurn = true
	case turnlog.TypeTurnEnd:
		r.inTurn = false
	}
	if r.inTurn {
		return false, nil
	}
	for i := range r.turn {
		r.builder(p).Add(&r.turn[i])
	}
	if err := r.builder(p).Err(); err != nil {
		if errors.Is(err, derived.ErrNotFound) || errors.Is(err, derived.ErrUnusable) {
			return false, fmt.Errorf("%w: %w", derived.ErrPartsLost, err)
		}
		return false, err
	}
	clear(r.turn) // the buffer outlives the pass: it keeps no settled event
	r.turn = r.turn[:0]
	r.ck.State.Next = e.Seq + 1
	r.ck.Summary.ThroughSeq = e.Seq
	return p.taken >= passEvents || p.takenBytes >= passBytes, nil
}

// commit folds what the pass built into the counts, stores its messages
// as parts and commits the checkpoint that lists them.
func (r *replayRunner) commit(p *replayPass) error {
	ck := r.ck
	res, open := p.b.Checkpoint()
	context := p.b.ContextState()
	ck.State.Open, ck.State.Context = open, &context
	r.foldCounts(p, res)
	partDiags := p.diags
	if res.Rebuilt {
		// The whole transcript, in new parts that replace the stored ones,
		// under new names: a fork's child may still read the old ones.
		ck.State.Parts, partDiags = nil, slices.Concat(p.priorDiags, p.diags)
		ck.State.Epoch = ck.State.Next
	}
	if err := ck.AppendParts(r.ctx, res.Messages, partDiags); err != nil {
		return err
	}
	ck.Summary.Replay.ContextMessages = int64(len(ck.State.Open.Tail())) + derived.MessageCount(ck.State.Parts)
	ck.Summary.Replay.RefusedDropped = int64(len(context.Dropped))
	return ck.Commit(r.ctx)
}

// foldCounts adds what the pass replayed to the run's counts and notes its
// new diagnostics.
func (r *replayRunner) foldCounts(p *replayPass, res replay.Result) {
	c := &p.counts
	c.Native += int64(res.Counts.Native)
	c.Foreign += int64(res.Counts.Foreign)
	c.Degraded += int64(res.Counts.Degraded)
	c.OrphanToolResults += int64(res.Counts.OrphanToolResults)
	for _, d := range p.diags {
		cause := string(d.Cause)
		switch d.Code {
		case replay.CodeInvalidContextEvent:
			c.ContextEventsNotApplied++
			if len(c.ContextEventSeqs) < derived.MaxSeqsPerCause {
				c.ContextEventSeqs = append(c.ContextEventSeqs, d.Seq)
			}
		case replay.CodeReplayStateRefused:
			if c.Refused == nil {
				c.Refused = map[string]int64{}
			}
			c.Refused[cause]++
			c.RefusedSeqs = noteSeq(c.RefusedSeqs, cause, d.Seq)
		case replay.CodeRefusalUnmapped:
			c.RefusalsUnmapped++
		default: // replay.CodeInvalidReplayState: a degraded message
			c.DegradedSeqs = noteSeq(c.DegradedSeqs, cause, d.Seq)
		}
		r.ck.Summary.Note(derived.Diagnostic{Seq: d.Seq, Code: d.Code, Cause: cause, Message: d.Message})
	}
	c.RunCompactions, c.RunEdits = int64(res.Context.Compactions), int64(res.Context.Edits)
	c.Compactions += c.RunCompactions
	c.Edits += c.RunEdits
	if res.Context.CompactionSeq >= 0 {
		c.LastCompactionSeq = &res.Context.CompactionSeq
	}
	r.ck.Summary.Replay = c
}

// A replay pass takes in at most about this many events, or bytes of
// them, before it stores what it built (at the next point where no turn is
// open): the builder's messages cost several times the bytes of the
// events they come from, most of all for many small ones. A pass of a MiB
// of events stores a few hundred KiB of messages, so a run that catches up
// with a long log seals a part, and keeps a checkpoint (derived
// HistoryDir), every few passes, as runs that follow a Session turn by
// turn do: where a fork cut in the middle of the history starts.
// Variables, so that tests can make every run several passes.
var (
	passEvents = 20_000
	passBytes  = 1 << 20
)

// defaultAdapter fills the fields target leaves empty from the session's
// adapter, as replay does with a session/start event.
func defaultAdapter(target, session turnlog.Adapter) turnlog.Adapter {
	for _, f := range []struct {
		dst *string
		src string
	}{
		{&target.Kind, session.Kind}, {&target.API, session.API},
		{&target.Provider, session.Provider}, {&target.Model, session.Model},
		{&target.ReleaseLine, session.ReleaseLine},
	} {
		if *f.dst == "" {
			*f.dst = f.src
		}
	}
	if turnlog.CheckReleaseLine(target.ReleaseLine) != nil {
		target.ReleaseLine = "" // a session/start naming no line this version knows
	}
	target.ReleaseLine = target.Line()
	return target
}

// noteSeq adds seq to cause's list in m, once, while it holds fewer than
// derived.MaxSeqsPerCause.
func noteSeq(m map[string][]int64, cause string, seq int64) map[string][]int64 {
	if len(m[cause]) >= derived.MaxSeqsPerCause || slices.Contains(m[cause], seq) {
		return m
	}
	if m == nil {
		m = map[string][]int64{}
	}
	m[cause] = append(m[cause], seq)
	return m
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
