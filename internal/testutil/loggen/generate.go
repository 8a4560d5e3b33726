// Package loggen generates realistic session logs for tests and
// benchmarks: pi-ai shaped turns with thinking, text and tool-call streams,
// version-2 replay envelopes and tool results of a few kilobytes.
package loggen

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Adapter is the adapter of generated sessions.
var Adapter = turnlog.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}

var words = strings.Fields(`the session log keeps every turn of the conversation so that a
replay can rebuild the transcript for the next request while signatures of thinking blocks
stay attached to the content they belong to and a fork copies whole turns into a new session
file function return error value context reader writer buffer decode encode stream chunk`)

// Log returns a valid log of at least minEvents events (whole turns), the
// same bytes for the same arguments.
func Log(minEvents int, seed uint64) []byte {
	g := generator{rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), clock: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	g.emit(0, turnlog.SessionStart{Adapter: Adapter})
	for turn := int64(1); g.seq < int64(minEvents); turn++ {
		g.turn(turn)
	}
	return g.out.Bytes()
}

type generator struct {
	rnd   *rand.Rand
	clock time.Time
	seq   int64
	out   bytes.Buffer
}

func (g *generator) emit(turn int64, p turnlog.Payload) {
	g.clock = g.clock.Add(time.Duration(20+g.rnd.IntN(200)) * time.Millisecond)
	e, err := turnlog.NewEvent(g.seq, turn, g.clock.Format(time.RFC3339Nano), p)
	if err != nil {
		panic(fmt.Sprintf("turnlogtest: generated an invalid event: %v", err))
	}
	g.out.Write(e.Raw)
	g.out.WriteByte('\n')
	g.seq++
}

func (g *generator) text(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[g.rnd.IntN(len(words))])
	}
	return b.String()
}

func (g *generator) signature() string {
	raw := make([]byte, 96)
	for i := range raw {
		raw[i] = byte(g.rnd.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)
}

func (g *generator) turn(turn int64) {
	g.emit(turn, turnlog.TurnStart{})
	content, _ := json.Marshal([]map[string]string{{"type": "text", "text": g.text(200 + g.rnd.IntN(400))}})
	g.emit(turn, turnlog.UserMessageEvent{Content: content})
	responses := 1 + g.rnd.IntN(3)
	for r := range responses {
		last := r == responses-1
		g.response(turn, r, !last)
	}
	g.emit(turn, turnlog.TurnEnd{Reason: turnlog.StopReasonStop})
}

// response streams thinking and text, and a tool call (answered by a tool
// result) unless it is the turn's last response.
func (g *generator) response(turn int64, response int, callTool bool) {
	g.emit(turn, turnlog.ResponseStart{Response: response, Adapter: Adapter})
	var entries []string
	block := 0
	stream := func(kind string, pieces int) {
		for range pieces {
			d := turnlog.Delta{Type: kind}
			if kind == turnlog.BlockThinking {
				d.Thinking = g.text(20 + g.rnd.IntN(40))
			} else {
				d.Text = g.text(10 + g.rnd.IntN(30))
			}
			g.emit(turn, turnlog.Chunk{Response: response, Block: block, Delta: d})
		}
		entries = append(entries, fmt.Sprintf(`{"type":%q,"signature":%q}`, kind, g.signature()))
		block++
	}
	stream(turnlog.BlockThinking, 5+g.rnd.IntN(15))
	stream(turnlog.BlockText, 10+g.rnd.IntN(30))
	stop := turnlog.StopReasonStop
	callID := fmt.Sprintf("toolu_%d_%d", turn, response)
	if callTool {
		stop = turnlog.StopReasonToolUse
		args := fmt.Sprintf(`{"path":"src/%s.go","pattern":%q}`, g.text(8), g.text(20))
		for i := 0; i < len(args); i += 12 {
			d := turnlog.Delta{Type: turnlog.BlockToolCall, ArgumentsDelta: args[i:min(i+12, len(args))]}
			if i == 0 {
				d.ID, d.Name = callID, "grep"
			}
			g.emit(turn, turnlog.Chunk{Response: response, Block: block, Delta: d})
		}
		entries = append(entries, `null`)
	}
	envelope := fmt.Sprintf(`{"kind":"pi-ai","version":2,"response":{"id":"msg_%d_%d","api":%q,"provider":%q,"model":%q},"blocks":[%s]}`,
		turn, response, Adapter.API, Adapter.Provider, Adapter.Model, strings.Join(entries, ","))
	g.emit(turn, turnlog.ResponseFinish{
		Response:    response,
		StopReason:  stop,
		ReplayState: json.RawMessage(envelope),
		Usage:       json.RawMessage(fmt.Sprintf(`{"input":%d,"output":%d}`, 1000+g.rnd.IntN(9000), 50+g.rnd.IntN(900))),
	})
	if callTool {
		content, _ := json.Marshal([]map[string]string{{"type": "text", "text": g.text(1000 + g.rnd.IntN(3000))}})
		g.emit(turn, turnlog.ToolResultEvent{ToolCallID: callID, ToolName: "grep", Content: content})
	}
}
