// Package compare compares two branches of a conversation: two Sessions'
// logs that share a prefix, as a fork's child shares its source's events
// through the cut, byte for byte. It finds where the logs part by comparing
// their event lines (for two Sessions of one fork tree, only from where
// their lineage says they agree: lineage.go), counts the shared prefix
// without holding it, and gives, for each side, the turns after the
// prefix with the messages of the side's stored transcript, their replay
// marks (native or foreign, degraded, refused, dropped blocks, synthetic
// tool results) and the frozen partial text of stopped responses, which
// is never part of a transcript. The result is plain data that encodes to
// JSON: what `kubectl turnlog diff` prints, and what a page can show.
package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// Log is what a comparison reads of a Session: its events from a seq on
// (reading only the segments that hold them), the messages of its stored
// transcript after a seq (reading only the parts that hold them), and the
// counts its assembly workers kept along the history. *agenthost.Log is
// one.
type Log interface {
	Events(ctx context.Context, from int64) iter.Seq2[turnlog.Event, error]
	TranscriptWindow(ctx context.Context, q derived.TranscriptQuery) (derived.TranscriptWindow, error)
	AssemblyAt(ctx context.Context, seq int64) (derived.AssemblyState, bool, error)
}

// Branch is one side of a comparison: its name in the result and in
// errors (a Session's namespace/name) and its log.
type Branch struct {
	Name string
	Log  Log
}

// Comparison is what two logs share and what each holds after that.
type Comparison struct {
	Shared Shared `json:"shared"`
	// Identical: the two logs hold the same events; A and B then hold no
	// turns.
	Identical bool `json:"identical"`
	// A and B are the branches after the prefix, in the order asked.
	A Side `json:"a"`
	B Side `json:"b"`
}

// Shared is the prefix both logs hold, event line for event line: seqs
// 0..CutSeq. It ends at a turn boundary: when the logs part inside a
// turn, the turn is not shared, and each side shows it.
type Shared struct {
	// CutSeq is the prefix's last seq: for a fork's child and its source,
	// the fork's cut.
	CutSeq int64 `json:"cutSeq"`
	// Turns is how many turns the prefix holds: FirstTurn..LastTurn.
	Turns     int64 `json:"turns"`
	FirstTurn int64 `json:"firstTurn"`
	LastTurn  int64 `json:"lastTurn"`
	// LastTurnEndSeq is the seq of the last turn's turn/end, and
	// LastReason why it ended (stop, toolUse, aborted, ...). CutSeq is
	// past it when events between turns follow.
	LastTurnEndSeq int64  `json:"lastTurnEndSeq"`
	LastReason     string `json:"lastReason,omitempty"`
	// Messages counts the prefix's messages as the log has them: user
	// messages (typed or inserted by the host), the assistant messages of
	// responses that completed, tool results.
	Messages int64 `json:"messages"`
	// SameThroughSeq is the last seq whose event both logs hold: past
	// CutSeq when the turn after the prefix starts the same in both.
	SameThroughSeq int64 `json:"sameThroughSeq"`
}

// Side is one branch after the shared prefix.
type Side struct {
	Name string `json:"name"`
	// HeadSeq is the last seq of the log as it was read.
	HeadSeq int64 `json:"headSeq"`
	// ThroughSeq is the last turn/end the stored transcript was replayed
	// through; -1 when the side holds nothing after the prefix (its
	// transcript is then not read).
	ThroughSeq int64 `json:"throughSeq"`
	// Turns are the turns after the prefix in log order; events between
	// turns that carry messages are a Turn 0 of their own.
	Turns []Turn `json:"turns"`
}

// Turn is one turn of a side, or the events between two turns (Turn 0).
type Turn struct {
	Turn     int64 `json:"turn"`
	StartSeq int64 `json:"startSeq"`
	// EndSeq is the turn's turn/end, -1 while it is open; for Turn 0, its
	// last event.
	EndSeq int64 `json:"endSeq"`
	// Reason is why the turn ended; empty while it is open.
	Reason string `json:"reason,omitempty"`
	// Replayed: the stored transcript covers the turn; until then it has
	// no messages, only what the raw log shows (frozen partial text).
	Replayed bool    `json:"replayed"`
	Entries  []Entry `json:"entries"`
}

// The kinds of Entry.
const (
	// KindMessage is a message of the stored transcript.
	KindMessage = "message"
	// KindFrozen is the frozen partial text of a response that never
	// completed: shown, never part of the transcript.
	KindFrozen = "frozen"
)

// Entry is a transcript message or a response's frozen partial text, in
// seq order within its turn.
type Entry struct {
	Kind string `json:"kind"`
	// Seq is the seq of the event the message comes from (for a synthetic
	// tool result, the assistant message that made the call); for frozen
	// text, the response's last event.
	Seq int64 `json:"seq"`
	// Text is the entry's words on one line of plain text: text blocks,
	// tool calls as "→ name {arguments}", thinking only when there is
	// nothing else.
	Text string `json:"text"`

	// Role, Replay (native or foreign, assistant messages), Synthetic (a
	// tool result made up for a call that got none), Origin (what inserted
	// a user or system message no one typed), ToolName (tool results) and
	// Message (the pi-ai message) are the transcript's.
	Role      string          `json:"role,omitempty"`
	Replay    string          `json:"replay,omitempty"`
	Synthetic bool            `json:"synthetic,omitempty"`
	Origin    string          `json:"origin,omitempty"`
	ToolName  string          `json:"toolName,omitempty"`
	Message   json.RawMessage `json:"message,omitempty"`
	// Degraded says why the message was replayed provider-neutral.
	Degraded *Degraded `json:"degraded,omitempty"`
	// Refused are replay's words for each block of the message the
	// provider refused; DroppedBlocks the blocks the transcript left out
	// for it (a target that drops refused blocks).
	Refused       []string `json:"refused,omitempty"`
	DroppedBlocks []int    `json:"droppedBlocks,omitempty"`

	// Response, StopReason (empty: the turn ended before the response
	// finished) and Content are frozen text's.
	Response   int                    `json:"response,omitempty"`
	StopReason string                 `json:"stopReason,omitempty"`
	Content    []turnlog.ContentBlock `json:"content,omitempty"`
}

// Degraded is why a message's replay state could not be used: the cause
// (kind, version, malformed, shape) and replay's diagnostic.
type Degraded struct {
	Cause  string `json:"cause"`
	Detail string `json:"detail,omitempty"`
}

// ErrNoSharedPrefix: the two logs share no whole turn. The error is a
// *NoSharedPrefixError.
var ErrNoSharedPrefix = errors.New("no shared prefix")

// NoSharedPrefixError says where two logs that share no whole turn part.
type NoSharedPrefixError struct {
	A, B string
	// DifferAt is the first seq whose events differ (or that one log does
	// not have).
	DifferAt int64
	// Empty names the sides whose logs hold no event at all.
	Empty []string
}

func (e *NoSharedPrefixError) Error() string {
	why := fmt.Sprintf("their logs differ from seq %d on", e.DifferAt)
	switch len(e.Empty) {
	case 1:
		why = fmt.Sprintf("the log of %s holds no event", e.Empty[0])
	case 2:
		why = "neither log holds an event"
	}
	return fmt.Sprintf("%s and %s share no prefix of whole turns: %s", e.A, e.B, why)
}

func (e *NoSharedPrefixError) Is(target error) bool { return target == ErrNoSharedPrefix }

// Compare compares a and b. It reads the two logs side by side from seq 0
// while their event lines are the same, keeping only counts, then each
// log from the end of the shared prefix on, and each side's stored
// transcript when the side holds turns after the prefix. Two logs that
// share no whole turn are a *NoSharedPrefixError; a side whose transcript
// is not stored yet is an error wrapping derived.ErrNotReplayed.
func Compare(ctx context.Context, a, b Branch) (Comparison, error) {
	return CompareFrom(ctx, a, b, -1)
}

// CompareFrom is Compare of two logs known to hold the same events
// 0..same (SharedThrough: their fork lineage says so; -1 for nothing
// known). Its result is Compare's, but it does not compare those events:
// it counts them from the last assembly state either log's workers kept
// at or before same (reading a's log from there; from seq 0 when there is
// none), and reads b's log from same on. Should the logs not agree
// through same after all, it believes the logs and compares them from
// seq 0.
func CompareFrom(ctx context.Context, a, b Branch, same int64) (Comparison, error) {
	p, ended, err := sharedPrefix(ctx, a, b, same)
	if err != nil {
		return Comparison{}, err
	}
	if p.shared.Turns == 0 {
		e := &NoSharedPrefixError{A: a.Name, B: b.Name, DifferAt: p.shared.SameThroughSeq + 1}
		for i, name := range []string{a.Name, b.Name} {
			if ended[i] && p.shared.SameThroughSeq < 0 {
				e.Empty = append(e.Empty, name)
			}
		}
		return Comparison{}, e
	}
	c := Comparison{Shared: p.shared}
	if ended[0] && ended[1] {
		c.Identical = true
		c.A, c.B = emptySide(a.Name, p.shared.CutSeq), emptySide(b.Name, p.shared.CutSeq)
		return c, nil
	}
	if c.A, err = readSide(ctx, a, p.shared.CutSeq); err != nil {
		return Comparison{}, err
	}
	if c.B, err = readSide(ctx, b, p.shared.CutSeq); err != nil {
		return Comparison{}, err
	}
	return c, nil
}

// sharedPrefix reads a and b in step while their event lines are the
// same, but for the events before seq same, which both are known to hold
// and a alone is read for; ended says which of the two logs had ended
// where they part (both: the logs are the same). Logs that part before
// same were not what their lineage said, and are read again from seq 0.
func sharedPrefix(ctx context.Context, a, b Branch, same int64) (p prefix, ended [2]bool, err error) {
	p, ended, err = scanPrefix(ctx, a, b, same)
	if err == nil && p.shared.SameThroughSeq < same {
		return scanPrefix(ctx, a, b, -1)
	}
	return p, ended, err
}

// scanPrefix is sharedPrefix's read: a from seq 0, or from the kept
// assembly state the count starts from, b from same on, the two compared
// from same on (from seq 0 when same is -1).
func scanPrefix(ctx context.Context, a, b Branch, same int64) (p prefix, ended [2]bool, err error) {
	p, from := newPrefix(), int64(0)
	if same >= 0 {
		if p, from, err = countedPrefix(ctx, a, b, same); err != nil {
			return p, ended, err
		}
	}
	nextA, stopA := iter.Pull2(a.Log.Events(ctx, from))
	defer stopA()
	// b from the first seq the two are compared at.
	nextB, stopB := iter.Pull2(b.Log.Events(ctx, max(same, from)))
	defer stopB()
	for {
		ea, okA, err := pull(nextA, a.Name)
		if err != nil {
			return p, ended, err
		}
		if okA && ea.Seq < same {
			p.add(&ea)
			continue
		}
		eb, okB, err := pull(nextB, b.Name)
		if err != nil {
			return p, ended, err
		}
		ended = [2]bool{!okA, !okB}
		if !okA && !okB {
			p.finish()
			return p, ended, nil
		}
		if !okA || !okB || !bytes.Equal(ea.Raw, eb.Raw) {
			return p, ended, nil
		}
		p.add(&ea)
	}
}

// countedPrefix is the prefix of the events before the last assembly
// state a's or b's workers kept at or before same, and where it ends; a
// new prefix from seq 0 when neither kept one with counts.
func countedPrefix(ctx context.Context, a, b Branch, same int64) (prefix, int64, error) {
	for _, br := range []Branch{a, b} {
		st, found, err := br.Log.AssemblyAt(ctx, same)
		if err != nil {
			return prefix{}, 0, fmt.Errorf("read the assembly state of %s: %w", br.Name, err)
		}
		if p, ok := prefixAt(st); found && ok {
			return p, st.Next, nil
		}
	}
	return newPrefix(), 0, nil
}

// pull is the next event of a pulled log; ok is false at its end.
func pull(next func() (turnlog.Event, error, bool), name string) (e turnlog.Event, ok bool, err error) {
	e, err, ok = next()
	if ok && err != nil {
		return e, false, fmt.Errorf("read the log of %s: %w", name, err)
	}
	return e, ok, nil
}

func emptySide(name string, head int64) Side {
	return Side{Name: name, HeadSeq: head, ThroughSeq: -1, Turns: []Turn{}}
}
