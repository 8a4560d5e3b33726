package ui

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// conversation is a window of a Session's stored transcript as the page
// shows it, turn by turn, with the frozen partial text of stopped
// responses beside the messages, never among them: the turns of the raw
// log's seqs From to To, and cursors for the windows before and after.
type conversation struct {
	// Note says why there is no transcript (no store given, not replayed
	// yet); the turns are then those of the raw log, if it could be read.
	Note       string `json:"note,omitempty"`
	ThroughSeq int64  `json:"throughSeq"`
	// Epoch names the stored transcript; a page holding windows of another
	// epoch reads the conversation again (a compaction rewrote it).
	Epoch string `json:"epoch,omitempty"`
	// From and To are the first and last seq of the raw log the window
	// covers (To is From-1 for a window without events).
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Earlier is the cursor of the window before this one (?before=),
	// empty when the window starts at the log's first event.
	Earlier string `json:"earlier,omitempty"`
	// Refresh is the cursor a live update asks with (?from=): the first seq
	// whose turns can still change. Only a window that reaches the log's
	// end has one.
	Refresh string `json:"refresh,omitempty"`
	// Reset: the window is the log's last turns, answered instead of a
	// live update too large to be one; the page starts over with it.
	Reset bool       `json:"reset,omitempty"`
	Turns []turnView `json:"turns"`
	// Marks are what is known of messages outside the window: a refusal
	// reported later than its message, an Event's words.
	Marks []mark `json:"marks,omitempty"`
}

// turnView is one turn, or the events between two turns (Turn 0).
type turnView struct {
	Turn int64 `json:"turn"`
	// Start is the seq the section starts at: its turn/start, or the first
	// entry's seq between turns.
	Start   int64   `json:"start"`
	CutSeq  int64   `json:"cutSeq"` // its turn/end, -1 while it is open
	Reason  string  `json:"reason,omitempty"`
	Entries []entry `json:"entries"`
}

// entry is a transcript message (Kind "message") or the frozen partial
// text of a response that never completed (Kind "frozen"). ForkAt is the
// atSeq a fork from it sends: the message's seq, or for frozen text the
// frozen node's turnEnd.seq - 0.9, as a decimal string the SessionFork
// controller floors; empty when it cannot be forked yet (a turn still
// streaming).
type entry struct {
	Kind   string `json:"kind"`
	Seq    int64  `json:"seq"`
	ForkAt string `json:"forkAt,omitempty"`

	Role      string          `json:"role,omitempty"`
	Replay    string          `json:"replay,omitempty"`
	Origin    string          `json:"origin,omitempty"`
	Synthetic bool            `json:"synthetic,omitempty"`
	Message   json.RawMessage `json:"message,omitempty"`
	Degraded  *degradedView   `json:"degraded,omitempty"`
	// Refused are what replay read of the provider refusing the message's
	// blocks, each diagnostic's words; DroppedBlocks the blocks the
	// transcript left out for it (spec.adapter.refusedBlocks: Drop).
	Refused       []string `json:"refused,omitempty"`
	DroppedBlocks []int    `json:"droppedBlocks,omitempty"`

	Response   int                    `json:"response,omitempty"`
	StopReason string                 `json:"stopReason,omitempty"`
	Content    []turnlog.ContentBlock `json:"content,omitempty"`
}

// degradedView says why a message was replayed provider-neutral: the
// cause, the replay diagnostic, and the words of its ReplayDegraded Event
// while the Event lasts.
type degradedView struct {
	Cause  string `json:"cause"`
	Detail string `json:"detail,omitempty"`
	Event  string `json:"event,omitempty"`
}

// mark is what the page is to show on the message at Seq, wherever it is.
type mark struct {
	Seq      int64         `json:"seq"`
	Degraded *degradedView `json:"degraded,omitempty"`
	Refused  []string      `json:"refused,omitempty"`
}

// rawLog is what the page needs of a window of the raw log: each event's
// turn, each turn's bounds, and the frozen partial text assembly leaves.
type rawLog struct {
	from, to int64 // the seqs read; to is from-1 when none were
	turnOf   map[int64]int64
	turns    map[int64]*turnView
	order    []*turnView // the turns by seq
	partials []assembler.Partial
}

func newRawLog(from int64) *rawLog {
	return &rawLog{from: from, to: from - 1, turnOf: map[int64]int64{}, turns: map[int64]*turnView{}}
}

// rawReader folds a window's events, in seq order, into a rawLog,
// assembling them for their partials as it goes: the raw log is the source
// of truth, and a stopped turn's text is never in the transcript.
type rawReader struct {
	raw *rawLog
	a   *assembler.Assembler
	n   int // events folded
}

func newRawReader(from int64) *rawReader {
	return &rawReader{raw: newRawLog(from), a: assembler.New(turnlog.Adapter{})}
}

func (r *rawReader) add(e *turnlog.Event) {
	out := r.raw
	if r.n == 0 {
		out.from = e.Seq
	}
	r.n++
	out.to = e.Seq
	out.turnOf[e.Seq] = e.Turn
	if _, ok := out.turns[e.Turn]; e.Turn > 0 && !ok {
		t := &turnView{Turn: e.Turn, Start: e.Seq, CutSeq: -1}
		out.turns[e.Turn] = t
		out.order = append(out.order, t)
	}
	if e.Type == turnlog.TypeTurnEnd {
		if t, ok := out.turns[e.Turn]; ok {
			end, _ := e.TurnEnd()
			t.CutSeq, t.Reason = e.Seq, string(end.Reason)
		}
	}
	out.partials = append(out.partials, r.a.Add(e).Partials...)
}

// done flushes the assembly: a turn still streaming leaves its partial.
func (r *rawReader) done() *rawLog {
	r.raw.partials = append(r.raw.partials, r.a.Flush().Partials...)
	return r.raw
}

// frozenForkAt is the frozen node's position: turnEnd.seq - 0.9, written
// as the decimal the chat view mints ("15.1" for a turn/end at 16).
func frozenForkAt(cutSeq int64) string {
	if cutSeq < 1 {
		return ""
	}
	return strconv.FormatInt(cutSeq-1, 10) + ".1"
}

// buildConversation puts the transcript's messages and the raw log's
// partials in seq order, turn by turn. raw may be nil (the log could not
// be read); msgs may be empty (not replayed yet). refused are replay's
// words on refused blocks by the seq of their message.
func buildConversation(msgs []replay.Message, raw *rawLog, degraded map[int64]*degradedView, refused map[int64][]string) []turnView {
	var entries []entry
	for _, m := range msgs {
		e := entry{Kind: "message", Seq: m.Seq, ForkAt: strconv.FormatInt(m.Seq, 10), Role: m.Role,
			Replay: string(m.Replay), Origin: m.Origin, Synthetic: m.Synthetic, Message: m.Message, Degraded: degraded[m.Seq],
			DroppedBlocks: m.DroppedBlocks}
		if refusable(m) {
			e.Refused = refused[m.Seq]
		}
		entries = append(entries, e)
	}
	turnOf := func(seq int64) int64 { return 0 }
	turnInfo := func(turn, seq int64) turnView { return turnView{Turn: turn, Start: seq, CutSeq: -1} }
	if raw != nil {
		turnOf = func(seq int64) int64 { return raw.turnOf[seq] }
		turnInfo = func(turn, seq int64) turnView {
			if t, ok := raw.turns[turn]; ok && turn > 0 {
				return turnView{Turn: turn, Start: t.Start, CutSeq: t.CutSeq, Reason: t.Reason}
			}
			return turnView{Turn: turn, Start: seq, CutSeq: -1}
		}
		for _, p := range raw.partials {
			e := entry{Kind: "frozen", Seq: p.Seq, Response: p.Response, StopReason: string(p.StopReason), Content: p.Content}
			if t := turnInfo(p.Turn, p.Seq); t.CutSeq >= 0 {
				e.ForkAt = frozenForkAt(t.CutSeq)
			}
			entries = append(entries, e)
		}
	}
	// A frozen node sits after every event of its turn's response, so at
	// the same seq it comes after the message.
	slices.SortStableFunc(entries, func(a, b entry) int {
		if a.Seq != b.Seq {
			return cmp.Compare(a.Seq, b.Seq)
		}
		return kindOrder(a.Kind) - kindOrder(b.Kind)
	})
	turns := []turnView{}
	for _, e := range entries {
		turn := turnOf(e.Seq)
		if n := len(turns); n == 0 || turns[n-1].Turn != turn {
			turns = append(turns, turnInfo(turn, e.Seq))
		}
		t := &turns[len(turns)-1]
		t.Entries = append(t.Entries, e)
	}
	return turns
}

// refusable reports whether a message can carry a refused block: an
// assistant message of the model's own.
func refusable(m replay.Message) bool { return m.Role == "assistant" && !m.Synthetic }

// refusals are replay's words on the blocks the provider refused, by the
// seq of their message.
func refusals(diagnostics []replay.Diagnostic) map[int64][]string {
	out := map[int64][]string{}
	for _, d := range diagnostics {
		if d.Code == replay.CodeReplayStateRefused && !slices.Contains(out[d.Seq], d.Message) {
			out[d.Seq] = append(out[d.Seq], d.Message)
		}
	}
	return out
}

func kindOrder(kind string) int {
	if kind == "frozen" {
		return 1
	}
	return 0
}

// degradedMessages are the causes of the Session's degraded messages by
// seq: from the transcript's diagnostics, else the Session's status, with
// the words of each message's ReplayDegraded Event.
func degradedMessages(session *turnlogv1.Session, diagnostics []replay.Diagnostic, events []eventView) map[int64]*degradedView {
	out := map[int64]*degradedView{}
	if r := session.Status.Replay; r != nil {
		for _, c := range cmdkit.DegradedCauses(r.DegradedSeqs) {
			for _, seq := range c.Seqs {
				out[seq] = &degradedView{Cause: c.Cause}
			}
		}
	}
	for _, d := range diagnostics {
		if d.Code == replay.CodeInvalidReplayState {
			out[d.Seq] = &degradedView{Cause: string(d.Cause), Detail: d.Message}
		}
	}
	for _, e := range events {
		if d, ok := out[e.Seq]; ok && e.Reason == turnlogv1.EventReplayDegraded {
			d.Event = e.Message
		}
	}
	return out
}
