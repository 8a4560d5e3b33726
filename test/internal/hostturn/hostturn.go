// Package hostturn is the turn the end-to-end suite and the scale harness
// append when they measure append → transcript: a question and a short
// streamed answer, written as a host writes a turn, so that both measure
// the same work.
package hostturn

import (
	"fmt"

	"github.com/turnlog/turnlog/agenthost"
)

// Model is the adapter the measured Sessions are created with.
var Model = agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}

// Events returns turn's events in the two Adds a host makes: streamed
// (the question and the answer's deltas, which the appender buffers, with
// session/start first on turn 1) and finish (the response's finish and the
// turn's end: one flush that writes the turn's segment and nudges the
// Session). The time that counts starts at the second Add.
func Events(turn int64) (streamed, finish []agenthost.Event) {
	if turn == 1 {
		streamed = append(streamed, agenthost.SessionStart(Model))
	}
	streamed = append(streamed,
		agenthost.TurnStart(turn),
		agenthost.UserText(turn, fmt.Sprintf("Question %d: what changed in the p99 latency?", turn)),
		agenthost.ResponseStart(turn, 0, Model),
		agenthost.TextDelta(turn, 0, 0, "The rise starts with Tuesday's deploy, "),
		agenthost.TextDelta(turn, 0, 0, "which halved the cache."))
	finish = []agenthost.Event{
		agenthost.ResponseFinish(turn, 0, agenthost.StopReasonStop, &agenthost.Envelope{
			Response: map[string]string{"id": fmt.Sprintf("msg_%d", turn)},
			Blocks:   []*agenthost.BlockState{{Type: "text"}},
		}, nil),
		agenthost.TurnEnd(turn, agenthost.StopReasonStop),
	}
	return streamed, finish
}
