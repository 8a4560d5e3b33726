package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// replayDir is where the transcript for target is kept. Each target has its
// own, so a Session whose spec.adapter changes starts a new transcript and
// never mixes messages replayed for two targets. ("transcript/", not the
// "replay/" of releases whose parts were single JSON objects: those are not
// read, and the workers replay such a Session again into the new form.) The
// release line is part of the target: transcripts stored before targets had
// one followed 0.73's rules, so every target hashes its line, an empty one
// included, and such a Session is replayed again under its line's rules.
func replayDir(target turnlog.Adapter) string {
	sum := sha256.Sum256([]byte(target.Kind + "\x00" + target.API + "\x00" + target.Provider + "\x00" + target.Model +
		"\x00line=" + target.ReleaseLine))
	return "transcript/" + hex.EncodeToString(sum[:8])
}

// replayCheckpoint names the checkpoint of the transcript for target.
func replayCheckpoint(target turnlog.Adapter) string { return replayDir(target) + "/checkpoint.json" }

// loadReplayState reads the replay checkpoint for target into state: a
// checkpoint whose list of parts cannot be a transcript's is unusable, like
// one that does not decode.
func loadReplayState(ctx context.Context, log Log, target turnlog.Adapter, state *replayState) (found bool, err error) {
	name := replayCheckpoint(target)
	found, err = loadCheckpoint(ctx, log, name, state)
	if err == nil && found {
		if perr := checkParts(state.Parts); perr != nil {
			err = fmt.Errorf("read %s: %w: %w", name, ErrUnusable, perr)
		}
	}
	return found, err
}

// replayState is the checkpoint replay resumes from.
type replayState struct {
	Summary Summary `json:"summary"`
	// Next is the first seq after the last replayed turn/end.
	Next int64 `json:"next"`
	// Open are the tool calls of the transcript's last assistant message
	// that the next turn may still answer. The transcript is the segments'
	// messages followed by Open.Tail().
	Open replay.OpenCalls `json:"open,omitzero"`
	// Parts are the stored parts of the transcript, in order.
	Parts []partRef `json:"parts,omitempty"`
}

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
func Replay(ctx context.Context, log Log, target turnlog.Adapter) (Summary, error) {
	sum, err := replayRun(ctx, log, target, false)
	if errors.Is(err, errPartsLost) {
		// Derived data: replay the log again into new parts.
		return replayRun(ctx, log, target, true)
	}
	return sum, err
}

// errPartsLost: a part the checkpoint lists is gone or is not that part.
var errPartsLost = errors.New("a stored transcript part is lost")

// replayRun is one run of Replay, from the checkpoint or, with startOver
// or when the checkpoint is unusable, from the start of the log.
func replayRun(ctx context.Context, log Log, target turnlog.Adapter, startOver bool) (Summary, error) {
	dir := replayDir(target)
	// A function, as the checkpoint is decoded into the counts it points to.
	fresh := func() replayState {
		return replayState{Summary: Summary{Task: TaskReplay, ThroughSeq: -1, Replay: &ReplayCounts{Target: target}}}
	}
	state := fresh()
	found, err := loadReplayState(ctx, log, target, &state)
	if err != nil && !errors.Is(err, ErrUnusable) {
		return Summary{}, err
	}
	head, herr := log.Head(ctx)
	if herr != nil {
		return Summary{}, fmt.Errorf("find the log's head: %w", herr)
	}
	var listed []partRef // deleted below once no longer listed
	if err == nil {
		listed = state.Parts
	}
	if err := resumable(err, found, state.Summary, state.Next, head); err != nil || state.Summary.Replay == nil || startOver {
		state = fresh() // derived data: replay the log again
	}
	events, err := log.Events(ctx, state.Next)
	if err != nil {
		return Summary{}, fmt.Errorf("read the log from seq %d: %w", state.Next, err)
	}
	defer events.Close()
	// The turns that end by the last turn/end assembly saw are known to
	// end: their events go to the builder as they come. A turn past it
	// may still be open, so its events wait until its turn/end (a run
	// stops at a turn boundary). So the run holds at most the events of
	// turns written since the last assembly, never a whole huge turn that
	// assembly has already seen end.
	settled := int64(-1)
	if asm, found, err := LoadAssembly(ctx, log); err == nil && found && asm.LastTurnEnd != nil {
		settled = asm.LastTurnEnd.Seq
	}
	sum := state.Summary
	sum.New, sum.NewTotal = nil, 0
	from := state.Next
	// pass takes in events until the log ends or, at a point where no turn
	// is open, until it has taken in passEvents or passBytes, and stores
	// what it built as a run would: the messages a run holds are bounded
	// by what one pass takes in, however much of the log a run catches up
	// with. It reports whether the log goes on.
	pass := func() (more bool, err error) {
		stored := state.Parts
		counts := *sum.Replay
		counts.DegradedSeqs = cloneSeqs(counts.DegradedSeqs)

		var degraded []replay.Diagnostic
		// A compaction or a context edit changes messages earlier runs stored:
		// the builder then asks for them, and the run stores the whole
		// transcript anew, with the diagnostics the old parts held.
		var prior func() ([]replay.Message, error)
		var priorDiags []replay.Diagnostic
		if state.Next > 0 {
			prior = func() ([]replay.Message, error) {
				parts, err := readParts(ctx, log, dir, stored)
				if err != nil {
					return nil, err
				}
				var msgs []replay.Message
				for _, p := range parts {
					msgs = p.appendMessages(msgs)
					priorDiags = append(priorDiags, p.header.Diagnostics...)
				}
				return msgs, nil
			}
		}
		var b *replay.Builder
		builder := func() *replay.Builder {
			if b == nil {
				b = replay.NewBuilder(replay.Options{Target: counts.Target, Through: replay.Head, Open: state.Open, Prior: prior,
					OnDegrade: func(d replay.Diagnostic) { degraded = append(degraded, d) }})
			}
			return b
		}
		var turn []turnlog.Event // events since the last settled one
		inTurn := false
		taken, takenBytes := 0, 0
		for {
			e, err := events.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return false, fmt.Errorf("read the log: %w", err)
			}
			taken, takenBytes = taken+1, takenBytes+len(e.Raw)
			if from == 0 && e.Seq == 0 {
				if p, ok := e.SessionStart(); ok {
					counts.Target = defaultAdapter(counts.Target, p.Adapter)
				}
			}
			if e.Seq == settled && e.Type != turnlog.TypeTurnEnd {
				return false, fmt.Errorf("%w: the assembly checkpoint's last turn/end, seq %d, is a %s in the log", ErrUnusable, settled, e.Type)
			}
			if e.Seq <= settled {
				builder().Add(&e)
			} else {
				turn = append(turn, e)
			}
			// A turn's messages are settled at its turn/end; an event between
			// turns (a compaction after a turn, a system message) is settled as
			// it comes.
			switch e.Type {
			case turnlog.TypeTurnStart:
				inTurn = true
			case turnlog.TypeTurnEnd:
				inTurn = false
			}
			if inTurn {
				continue
			}
			for i := range turn {
				builder().Add(&turn[i])
			}
			if err := builder().Err(); err != nil {
				if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnusable) {
					return false, fmt.Errorf("%w: %w", errPartsLost, err)
				}
				return false, err
			}
			turn = turn[:0]
			state.Next = e.Seq + 1
			sum.ThroughSeq = e.Seq
			if taken >= passEvents || takenBytes >= passBytes {
				more = true
				break
			}
		}
		if b == nil {
			return false, nil // no turn ended since the last run
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
		counts.RunCompactions, counts.RunEdits = int64(res.Context.Compactions), int64(res.Context.Edits)
		counts.Compactions += counts.RunCompactions
		counts.Edits += counts.RunEdits
		if res.Context.CompactionSeq >= 0 {
			counts.LastCompactionSeq = &res.Context.CompactionSeq
		}
		sum.Replay = &counts
		partDiags := degraded
		if res.Rebuilt {
			stored, partDiags = nil, slices.Concat(priorDiags, degraded)
		}
		chain, err := extendParts(ctx, log, dir, stored, res.Messages, partDiags)
		if err != nil {
			return false, err
		}
		counts.ContextMessages = int64(len(state.Open.Tail()))
		if len(chain) > 0 {
			last := chain[len(chain)-1].ref
			counts.ContextMessages += last.Start + last.Count
		}
		state.Parts = make([]partRef, 0, len(chain))
		for _, l := range chain {
			if l.part != nil {
				data, err := l.part.encode()
				if err != nil {
					return false, err
				}
				l.ref.CRC32C = crc32.Checksum(data, castagnoli)
				if err := log.PutDerived(ctx, l.ref.name(dir), data); err != nil {
					return false, fmt.Errorf("write %s: %w", l.ref.name(dir), err)
				}
			}
			state.Parts = append(state.Parts, l.ref)
		}
		state.Summary = sum
		if err := storeJSON(ctx, log, replayCheckpoint(target), state); err != nil {
			return false, err
		}
		// Only now are the merged parts unlisted. A reader that read the
		// previous checkpoint and misses one of them reads the new one.
		deleteUnlisted(ctx, log, dir, listed, state.Parts)
		listed = state.Parts
		return more, nil
	}
	for {
		more, err := pass()
		if err != nil {
			return Summary{}, err
		}
		if !more {
			return sum, nil
		}
	}
}

// A replay pass takes in at most about this many events, or bytes of
// them, before it stores what it built (at the next point where no turn is
// open): the builder's messages cost several times the bytes of the
// events they come from, most of all for many small ones. Variables, so
// that tests can make every run several passes.
var (
	passEvents = 20_000
	passBytes  = 16 << 20
)

// link is a part of the transcript's chain: a stored one (part nil) or one
// this run made, which is to be written.
type link struct {
	ref  partRef
	part *part
}

// extendParts appends a run's messages to the chain of stored parts and
// merges the tail as long as a part is no bigger than the one after it
// (and the two fit in one part). Like a binary counter, that keeps a
// Session replayed turn by turn to a few parts — about log2 of its
// messages — and rewrites each message about log2 times in all, so a host
// reading the transcript makes a handful of requests however often the
// workers ran.
func extendParts(ctx context.Context, log Log, dir string, stored []partRef, msgs []replay.Message, diags []replay.Diagnostic) ([]link, error) {
	chain := make([]link, 0, len(stored)+1)
	start := int64(0)
	for _, r := range stored {
		chain = append(chain, link{ref: r})
		start = r.Start + r.Count
	}
	fresh, err := newParts(start, msgs, diags)
	if err != nil {
		return nil, err
	}
	for _, p := range fresh {
		chain = append(chain, link{ref: p.ref(), part: p})
	}
	if len(fresh) == 0 {
		return chain, nil
	}
	for n := len(chain); n >= 2; n = len(chain) {
		x, y := chain[n-2], chain[n-1]
		if x.ref.Bytes > y.ref.Bytes || x.ref.Bytes+y.ref.Bytes > maxPartBytes {
			break
		}
		if x.part == nil {
			name := x.ref.name(dir)
			data, err := log.GetDerived(ctx, name, 0)
			if err != nil {
				if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnusable) {
					return nil, fmt.Errorf("%w: %w", errPartsLost, err)
				}
				return nil, fmt.Errorf("read %s: %w", name, err)
			}
			if x.part, err = decodePart(data, x.ref); err != nil {
				return nil, fmt.Errorf("%w: read %s: %w", errPartsLost, name, err)
			}
		}
		m := merge(x.part, y.part)
		chain = append(chain[:n-2], link{ref: m.ref(), part: m})
	}
	if len(chain) > maxParts {
		last := chain[len(chain)-1].ref
		return nil, fmt.Errorf("the transcript would have %d messages in %d parts of up to %d bytes: more than the %d parts a stored transcript may have", last.Start+last.Count, len(chain), maxPartBytes, maxParts)
	}
	return chain, nil
}

// deleteUnlisted deletes the parts the previous checkpoint listed and the
// new one does not. A part that cannot be deleted is left: nothing reads
// an unlisted part, and deleting the Session removes it.
func deleteUnlisted(ctx context.Context, log Log, dir string, before, after []partRef) {
	listed := make(map[string]bool, len(after))
	for _, r := range after {
		listed[r.name(dir)] = true
	}
	for _, r := range before {
		if name := r.name(dir); !listed[name] {
			_ = log.DeleteDerived(ctx, name)
		}
	}
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
