package ui

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// conversation is a Session's stored transcript as the page shows it, turn
// by turn, with the frozen partial text of stopped responses beside the
// messages, never among them.
type conversation struct {
	// Note says why there is no transcript (no store given, not replayed
	// yet); the turns are then those of the raw log, if it could be read.
	Note       string     `json:"note,omitempty"`
	ThroughSeq int64      `json:"throughSeq"`
	Turns      []turnView `json:"turns"`
}

// turnView is one turn, or the events between two turns (Turn 0).
type turnView struct {
	Turn    int64   `json:"turn"`
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

// rawLog is what the page needs of the raw log: each event's turn, each
// turn's end, and the frozen partial text assembly leaves.
type rawLog struct {
	turnOf   map[int64]int64
	turns    map[int64]*turnView
	partials []assembler.Partial
}

// readRawLog reads the whole log, as `turnlog export` does, and
// assembles it in this process for its partials as it reads, holding only
// the open turn's stream: the raw log is the source of truth, and a
// stopped turn's text is never in the transcript.
func readRawLog(ctx context.Context, log *agenthost.Log) (*rawLog, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(cmdkit.Export(ctx, log, pw)) }()
	defer pr.Close()
	out := &rawLog{turnOf: map[int64]int64{}, turns: map[int64]*turnView{}}
	a := assembler.New(turnlog.Adapter{})
	r := turnlog.NewReaderWith(pr, nil)
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		out.turnOf[e.Seq] = e.Turn
		switch e.Type {
		case turnlog.TypeTurnStart:
			out.turns[e.Turn] = &turnView{Turn: e.Turn, CutSeq: -1}
		case turnlog.TypeTurnEnd:
			if t, ok := out.turns[e.Turn]; ok {
				end, _ := e.TurnEnd()
				t.CutSeq, t.Reason = e.Seq, string(end.Reason)
			}
		}
		out.partials = append(out.partials, a.Add(&e).Partials...)
	}
	out.partials = append(out.partials, a.Flush().Partials...)
	return out, nil
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
// be read); tr may be empty (not replayed yet).
func buildConversation(tr agenthost.Transcript, raw *rawLog, degraded map[int64]*degradedView) []turnView {
	refused := map[int64][]string{}
	for _, d := range tr.Diagnostics {
		if d.Code == replay.CodeReplayStateRefused {
			refused[d.Seq] = append(refused[d.Seq], d.Message)
		}
	}
	var entries []entry
	for _, m := range tr.Messages {
		e := entry{Kind: "message", Seq: m.Seq, ForkAt: strconv.FormatInt(m.Seq, 10), Role: m.Role,
			Replay: string(m.Replay), Origin: m.Origin, Synthetic: m.Synthetic, Message: m.Message, Degraded: degraded[m.Seq],
			DroppedBlocks: m.DroppedBlocks}
		if m.Role == "assistant" && !m.Synthetic {
			e.Refused = refused[m.Seq]
		}
		entries = append(entries, e)
	}
	turnOf := func(seq int64) int64 { return 0 }
	turnInfo := func(turn int64) turnView { return turnView{Turn: turn, CutSeq: -1} }
	if raw != nil {
		turnOf = func(seq int64) int64 { return raw.turnOf[seq] }
		turnInfo = func(turn int64) turnView {
			if t, ok := raw.turns[turn]; ok {
				return turnView{Turn: turn, CutSeq: t.CutSeq, Reason: t.Reason}
			}
			return turnView{Turn: turn, CutSeq: -1}
		}
		for _, p := range raw.partials {
			e := entry{Kind: "frozen", Seq: p.Seq, Response: p.Response, StopReason: string(p.StopReason), Content: p.Content}
			if t := turnInfo(p.Turn); t.CutSeq >= 0 {
				e.ForkAt = frozenForkAt(t.CutSeq)
			}
			entries = append(entries, e)
		}
	}
	// A frozen node sits after every event of its turn's response, so at
	// the same seq it comes after the message.
	slices.SortStableFunc(entries, func(a, b entry) int {
		if a.Seq != b.Seq {
			return int(a.Seq - b.Seq)
		}
		return kindOrder(a.Kind) - kindOrder(b.Kind)
	})
	turns := []turnView{}
	for _, e := range entries {
		turn := turnOf(e.Seq)
		if n := len(turns); n == 0 || turns[n-1].Turn != turn {
			turns = append(turns, turnInfo(turn))
		}
		t := &turns[len(turns)-1]
		t.Entries = append(t.Entries, e)
	}
	return turns
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
func degradedMessages(session *turnlogv1.Session, tr agenthost.Transcript, events []eventView) map[int64]*degradedView {
	out := map[int64]*degradedView{}
	if r := session.Status.Replay; r != nil {
		for _, c := range cmdkit.DegradedCauses(r.DegradedSeqs) {
			for _, seq := range c.Seqs {
				out[seq] = &degradedView{Cause: c.Cause}
			}
		}
	}
	for _, d := range tr.Diagnostics {
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
