package compare

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// readSide reads one branch after the shared prefix, which ends at cut:
// its turns from the raw log, with the frozen text of their stopped
// responses, then the messages of its stored transcript after cut.
func readSide(ctx context.Context, br Branch, cut int64) (Side, error) {
	s := sideBuilder{side: emptySide(br.Name, cut), asm: assembler.New(turnlog.Adapter{})}
	for e, err := range br.Log.Events(ctx, cut+1) {
		if err != nil {
			return Side{}, fmt.Errorf("read the log of %s: %w", br.Name, err)
		}
		s.add(&e)
	}
	if len(s.side.Turns) == 0 {
		return s.side, nil
	}
	tr, err := br.Log.TranscriptWindow(ctx, derived.TranscriptQuery{From: cut + 1, Through: math.MaxInt64})
	if errors.Is(err, derived.ErrNotReplayed) {
		return Side{}, fmt.Errorf("%s has no stored transcript yet: %w", br.Name, err)
	}
	if err != nil {
		return Side{}, fmt.Errorf("read the transcript of %s: %w", br.Name, err)
	}
	s.addTranscript(tr, cut)
	return s.finish(), nil
}

// sideBuilder gathers a side's turns as its events are read, and the
// frozen text assembly leaves, to be put in the turns with the messages.
type sideBuilder struct {
	side Side
	asm  *assembler.Assembler
	// hostWrote are the responses of the open turn whose message the host
	// wrote: such a response leaves no frozen text.
	hostWrote map[int]bool
	frozen    []Entry
}

func (s *sideBuilder) add(e *turnlog.Event) {
	s.side.HeadSeq = e.Seq
	for _, p := range s.asm.Add(e).Partials {
		if !s.hostWrote[p.Response] {
			s.frozen = append(s.frozen, Entry{Kind: KindFrozen, Seq: p.Seq, Text: blocksText(p.Content),
				Response: p.Response, StopReason: string(p.StopReason), Content: p.Content})
		}
	}
	turns := &s.side.Turns
	last := len(*turns) - 1
	switch {
	case e.Type == turnlog.TypeTurnStart:
		*turns = append(*turns, Turn{Turn: e.Turn, StartSeq: e.Seq, EndSeq: -1, Entries: []Entry{}})
		s.hostWrote = nil
	case e.Type == turnlog.TypeTurnEnd && last >= 0:
		end, _ := e.TurnEnd()
		(*turns)[last].EndSeq, (*turns)[last].Reason = e.Seq, string(end.Reason)
	case e.Type == turnlog.TypeAssistantMessage:
		m, _ := e.AssistantMessage()
		if s.hostWrote == nil {
			s.hostWrote = map[int]bool{}
		}
		s.hostWrote[m.Response] = true
	case e.Turn == 0 && last >= 0 && (*turns)[last].Turn == 0:
		(*turns)[last].EndSeq = e.Seq
	case e.Turn == 0:
		*turns = append(*turns, Turn{StartSeq: e.Seq, EndSeq: e.Seq, Entries: []Entry{}})
	}
}

// addTranscript puts the transcript's messages after cut in their turns,
// with their marks, and the frozen text beside them.
func (s *sideBuilder) addTranscript(tr derived.TranscriptWindow, cut int64) {
	s.side.ThroughSeq = tr.ThroughSeq
	degraded := map[int64]*Degraded{}
	refused := map[int64][]string{}
	for _, d := range tr.Diagnostics {
		switch {
		case d.Seq <= cut:
		case d.Code == replay.CodeInvalidReplayState:
			degraded[d.Seq] = &Degraded{Cause: string(d.Cause), Detail: d.Message}
		case d.Code == replay.CodeReplayStateRefused:
			refused[d.Seq] = append(refused[d.Seq], d.Message)
		}
	}
	for _, wm := range tr.Messages {
		m := wm.Message
		if m.Seq <= cut {
			continue
		}
		e := Entry{Kind: KindMessage, Seq: m.Seq, Role: m.Role, Replay: string(m.Replay), Synthetic: m.Synthetic,
			Origin: m.Origin, Message: m.Message, DroppedBlocks: m.DroppedBlocks}
		e.Text, e.ToolName = messageText(m.Message)
		if m.Role == "assistant" && !m.Synthetic {
			e.Degraded, e.Refused = degraded[m.Seq], refused[m.Seq]
		}
		s.place(e)
	}
	for _, f := range s.frozen {
		s.place(f)
	}
	s.frozen = nil
}

// place adds e to the turn that holds its seq: the last one starting at
// or before it (the turns cover every seq after the cut).
func (s *sideBuilder) place(e Entry) {
	turns := s.side.Turns
	i := sort.Search(len(turns), func(i int) bool { return turns[i].StartSeq > e.Seq }) - 1
	if i >= 0 {
		turns[i].Entries = append(turns[i].Entries, e)
	}
}

// finish orders each turn's entries by seq, frozen text after a message
// of the same seq, marks the turns the transcript covers and leaves out
// the stretches between turns that hold no message.
func (s *sideBuilder) finish() Side {
	kept := s.side.Turns[:0]
	for _, t := range s.side.Turns {
		if t.Turn == 0 && len(t.Entries) == 0 {
			continue
		}
		slices.SortStableFunc(t.Entries, func(a, b Entry) int {
			if c := cmp.Compare(a.Seq, b.Seq); c != 0 {
				return c
			}
			return cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind))
		})
		t.Replayed = t.EndSeq >= 0 && t.EndSeq <= s.side.ThroughSeq
		kept = append(kept, t)
	}
	s.side.Turns = kept
	return s.side
}

func kindOrder(kind string) int {
	if kind == KindFrozen {
		return 1
	}
	return 0
}
