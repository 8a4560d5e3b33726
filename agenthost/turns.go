package agenthost

import (
	"context"
	"encoding/json"
	"math"
	"strings"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Turn is one turn of a log, as a place to fork at: a SessionFork with
// atSeq CutSeq makes a child whose log ends with this turn.
type Turn struct {
	// Turn is the turn's number.
	Turn int64
	// StartSeq is the seq of its turn/start.
	StartSeq int64
	// CutSeq is the seq of its turn/end, -1 while it is still open.
	CutSeq int64
	// Reason is why it ended (stop, length, toolUse, error, aborted); ""
	// while it is open.
	Reason StopReason
	// UserText is the text of its first user message ("" if it has none).
	UserText string
}

// Turns reads the log and returns its turns in order. It reads the whole
// log, so it costs what Export costs.
func (l *Log) Turns(ctx context.Context) ([]Turn, error) {
	var out []Turn
	for e, err := range l.log.Read(ctx, 0, math.MaxInt64) {
		if err != nil {
			return nil, err
		}
		switch turnlog.EventType(e.Type) {
		case turnlog.TypeTurnStart:
			out = append(out, Turn{Turn: e.Turn, StartSeq: e.Seq, CutSeq: -1})
		case turnlog.TypeTurnEnd:
			if n := len(out); n > 0 && out[n-1].Turn == e.Turn {
				out[n-1].CutSeq, out[n-1].Reason = e.Seq, StopReason(e.Reason)
			}
		case turnlog.TypeUserMessage:
			n := len(out)
			if n == 0 || out[n-1].Turn != e.Turn || out[n-1].UserText != "" {
				continue
			}
			ev, err := turnlog.DecodeEvent(e.Line)
			if err != nil {
				return nil, err
			}
			if m, ok := ev.UserMessage(); ok {
				out[n-1].UserText = contentText(m.Content)
			}
		}
	}
	return out, nil
}

// contentText is the text of pi-ai user content: a string, or the text
// blocks of a block list joined by newlines.
func contentText(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var blocks []struct {
		Type, Text string
	}
	if json.Unmarshal(content, &blocks) != nil {
		return ""
	}
	var texts []string
	for _, b := range blocks {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}
