package derived

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// A reader that shows a long transcript a few turns at a time (a session
// browser) wants the messages of a range of seqs without reading every
// part. The checkpoint lists parts by message index, not by seq, but the
// transcript is in seq order around its anchors: a user or an assistant
// message (not a compaction's) is never moved, so every message before an
// anchor has a lower seq and every message after it one at least as high.
// Only system messages held behind open tool calls, the synthetic results
// of calls that got none (both placed later than their seq) and the
// compaction's messages at the transcript's start (placed earlier) stand
// out of order. Reading the parts backwards, a part that holds an anchor
// below the range is the last one that can hold a message of the range,
// but for the compaction's, whose seq the checkpoint keeps. A window also
// returns hints — message indexes valid while the transcript is only
// extended (its Epoch) — so that the next window, earlier or later, starts
// from the part it needs rather than from the last one.

// TranscriptQuery asks for the messages of the stored transcript whose
// seqs are in [From, Through].
type TranscriptQuery struct {
	From, Through int64
	// Hint, from an earlier window of the same Epoch, bounds where the
	// messages asked for are; one of another epoch is ignored.
	Hint TranscriptHint
}

// TranscriptHint says that the messages a query asks for are at message
// indexes Lo (inclusive) to Hi (exclusive; -1: to the end, the synthetic
// tail included) of the transcript of Epoch.
type TranscriptHint struct {
	Epoch  string
	Lo, Hi int64
}

// TranscriptWindow is what a TranscriptQuery found.
type TranscriptWindow struct {
	// ThroughSeq is the last turn/end replayed.
	ThroughSeq int64
	// Epoch names the transcript as it is now; it changes when a replay
	// rewrites what was stored rather than extending it (a compaction, a
	// context edit, a refused block dropped, another target).
	Epoch string
	// Stored is how many messages the parts hold; a message at an index
	// at or past it is of the synthetic tail, which the next turn may
	// replace.
	Stored int64
	// Messages are those asked for, in transcript order.
	Messages []WindowMessage
	// Diagnostics are those of every part read: the window's messages'
	// and some of other messages (a refusal is stored with the run that
	// read it, later than its message).
	Diagnostics []replay.Diagnostic

	query  TranscriptQuery
	lo, hi int64 // the bounds the query was answered with
	// anchors are the anchors of the parts read, by index.
	anchors []windowAnchor
}

// WindowMessage is a transcript message and its index.
type WindowMessage struct {
	Index int64
	replay.Message
}

type windowAnchor struct{ index, seq int64 }

// isAnchor reports whether m stands where its seq puts it.
func isAnchor(m replay.Message) bool {
	return (m.Role == "user" || m.Role == "assistant") && m.Origin != replay.OriginCompaction
}

// EarlierHint is the hint for a query of seqs before the window's From:
// they are before the first anchor at or after From.
func (w *TranscriptWindow) EarlierHint() TranscriptHint {
	i := sort.Search(len(w.anchors), func(i int) bool { return w.anchors[i].seq >= w.query.From })
	if i < len(w.anchors) {
		return TranscriptHint{Epoch: w.Epoch, Lo: 0, Hi: w.anchors[i].index}
	}
	return TranscriptHint{Epoch: w.Epoch, Lo: 0, Hi: w.hi}
}

// LaterHint is the hint for a query of seqs from seq on (seq at least the
// window's From): they are after the last anchor below seq.
func (w *TranscriptWindow) LaterHint(seq int64) TranscriptHint {
	i := sort.Search(len(w.anchors), func(i int) bool { return w.anchors[i].seq >= seq })
	if i > 0 {
		return TranscriptHint{Epoch: w.Epoch, Lo: w.anchors[i-1].index + 1, Hi: -1}
	}
	return TranscriptHint{Epoch: w.Epoch, Lo: w.lo, Hi: -1}
}

// transcriptEpoch names the transcript in dir as the counts of what
// rewrites a stored transcript have it.
func transcriptEpoch(dir string, c *ReplayCounts) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d\x00%d", dir, c.Compactions, c.Edits, c.RefusedDropped))
	return hex.EncodeToString(sum[:6])
}

// LoadTranscriptWindow returns the messages of the transcript stored for
// target whose seqs are in [q.From, q.Through], reading only the parts
// that can hold them: from the last part the hint allows, backwards, to
// the first that holds an anchor below q.From (and the first part too for
// the compaction's messages, when the range holds its seq). Before the
// first replayed turn it returns a *NotReplayedError.
func LoadTranscriptWindow(ctx context.Context, log Log, target turnlog.Adapter, q TranscriptQuery) (TranscriptWindow, error) {
	for attempt := 1; ; attempt++ {
		w, err := loadTranscriptWindow(ctx, log, target, q)
		if !errors.Is(err, ErrNotFound) || attempt == loadAttempts {
			return w, err
		}
	}
}

func loadTranscriptWindow(ctx context.Context, log Log, target turnlog.Adapter, q TranscriptQuery) (TranscriptWindow, error) {
	var state ReplayState
	found, err := LoadReplayState(ctx, log, target, &state)
	if err != nil {
		return TranscriptWindow{}, err
	}
	if !found || state.Next == 0 {
		return TranscriptWindow{}, &NotReplayedError{Want: -1, Through: -1}
	}
	c := state.Summary.Replay
	if c == nil {
		return TranscriptWindow{}, fmt.Errorf("read %s: %w: no replay counts", ReplayCheckpointName(target), ErrUnusable)
	}
	dir := TranscriptDir(target)
	stored := MessageCount(state.Parts)
	w := TranscriptWindow{ThroughSeq: state.Next - 1, Epoch: transcriptEpoch(dir, c), Stored: stored, query: q, hi: -1}
	lo, hi := int64(0), int64(-1)
	if h := q.Hint; h.Epoch == w.Epoch && h.Lo >= 0 && h.Lo <= stored && h.Hi <= stored && (h.Hi < 0 || h.Lo <= h.Hi) {
		lo, hi = h.Lo, h.Hi
	}
	w.lo, w.hi = lo, hi
	if q.Through < q.From {
		return w, nil
	}
	inRange := func(m replay.Message) bool { return m.Seq >= q.From && m.Seq <= q.Through }
	if hi < 0 {
		for i, m := range state.Open.Tail() {
			if inRange(m) {
				w.Messages = append(w.Messages, WindowMessage{Index: stored + int64(i), Message: m})
			}
		}
	}
	keptFrom := int64(0)
	if state.Context != nil {
		keptFrom = state.Context.KeptFrom
	}
	compaction := c.Context().CompactionSeq
	holdsCompaction := compaction >= 0 && compaction >= q.From && compaction <= q.Through
	if q.Through < keptFrom && !holdsCompaction {
		return w, nil // compacted away: no message of the range is stored
	}
	last := len(state.Parts) - 1
	switch {
	case hi == 0:
		last = -1
	case hi > 0: // the part that holds message hi-1
		last = sort.Search(len(state.Parts), func(i int) bool { return state.Parts[i].Start+state.Parts[i].Count >= hi })
	}
	tookFirst := false // the messages at index 0 on were looked at
	for i := last; i >= 0; i-- {
		if r := state.Parts[i]; r.Start+r.Count <= lo {
			break // it and those before it end below the hint
		}
		done, err := w.scanPart(ctx, log, dir, state.Parts[i], lo, hi, inRange, true)
		if err != nil {
			return TranscriptWindow{}, err
		}
		tookFirst = i == 0 && lo == 0
		if done {
			break
		}
	}
	if holdsCompaction && !tookFirst && len(state.Parts) > 0 {
		// The compaction's messages come first, whatever their seq.
		if _, err := w.scanPart(ctx, log, dir, state.Parts[0], 0, -1, func(m replay.Message) bool {
			return m.Origin == replay.OriginCompaction && inRange(m)
		}, false); err != nil {
			return TranscriptWindow{}, err
		}
	}
	slices.SortFunc(w.Messages, func(a, b WindowMessage) int { return cmp.Compare(a.Index, b.Index) })
	slices.SortFunc(w.anchors, func(a, b windowAnchor) int { return cmp.Compare(a.index, b.index) })
	return w, nil
}

// scanPart reads one part and takes the messages keep accepts among those
// at indexes lo to hi (exclusive; -1: no bound), noting its anchors when
// asked. It reports whether no earlier part can hold a message of the
// query: this one holds an anchor below From, or starts at lo.
func (w *TranscriptWindow) scanPart(ctx context.Context, log Log, dir string, ref PartRef, lo, hi int64, keep func(replay.Message) bool, anchors bool) (bool, error) {
	parts, err := readParts(ctx, log, dir, []PartRef{ref})
	if err != nil {
		return false, err
	}
	p := parts[0]
	done := ref.Start <= lo
	for i, m := range p.appendMessages(nil) {
		index := ref.Start + int64(i)
		if index < lo || (hi >= 0 && index >= hi) {
			continue
		}
		if keep(m) {
			w.Messages = append(w.Messages, WindowMessage{Index: index, Message: m})
		}
		if anchors && isAnchor(m) {
			w.anchors = append(w.anchors, windowAnchor{index: index, seq: m.Seq})
			done = done || m.Seq < w.query.From
		}
	}
	w.Diagnostics = append(w.Diagnostics, p.header.Diagnostics...)
	return done, nil
}
