// Package pitest holds what turnlog's tests against pi itself share: how a
// pi-coding-agent context, after pi-ai's transformMessages, becomes the
// transcript turnlog must replay, with the deviations docs/log-format.md
// lists applied. The import differential test (agenthost) and the live
// recording tests (test/pirecord) compare against the same expectation, so
// a deviation is described once.
package pitest

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Deviations from pi's context that a recorded session's transcript has
// by design (docs/log-format.md, "Deviations").
const (
	// OrphanToolResults: a tool result that answers no open call stays out.
	OrphanToolResults = "orphan-tool-results"
	// SyntheticResultTime: a synthetic result for a call left open has its
	// call's time.
	SyntheticResultTime = "synthetic-result-time"
	// NoStateThinking: an assistant message of the target model with no
	// replay state at all (no signature anywhere) replays foreign, so on
	// the 1.x line its thinking is dropped.
	NoStateThinking = "no-state-thinking"
)

// Target is the model a transcript is replayed for.
type Target struct{ Provider, Model, API string }

// ExpectedResume is pi's transformed messages (transformed, from
// transformMessages) of its context (context, from convertToLlm) with the
// deviations applied: what turnlog's transcript must hold. note, if set,
// is told each deviation applied.
func ExpectedResume(context, transformed []json.RawMessage, target Target, note func(deviation string)) []any {
	if note == nil {
		note = func(string) {}
	}
	inputTimes := map[string]bool{} // the tool results pi was given, by call id and time
	var sources []map[string]any    // the assistant messages pi keeps, in order
	for _, raw := range context {
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		switch {
		case m["role"] == "toolResult":
			inputTimes[fmt.Sprint(m["toolCallId"], "@", m["timestamp"])] = true
		case m["role"] == "assistant" && m["stopReason"] != "aborted" && m["stopReason"] != "error":
			sources = append(sources, m)
		}
	}
	var out []any
	var open, answered []string
	var lastTime any
	nth := 0
	for _, raw := range transformed {
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		switch m["role"] {
		case "assistant":
			source := sources[nth]
			nth++
			if source["provider"] == target.Provider && source["model"] == target.Model && source["api"] == target.API &&
				!Signed(source) && hasThinking(m) {
				m["content"] = slices.DeleteFunc(m["content"].([]any), func(b any) bool { return b.(map[string]any)["type"] == "thinking" })
				note(NoStateThinking)
			}
			open, answered, lastTime = nil, nil, m["timestamp"]
			for _, b := range m["content"].([]any) {
				if b := b.(map[string]any); b["type"] == "toolCall" {
					open = append(open, b["id"].(string))
				}
			}
		case "user":
			open, answered = nil, nil
		case "toolResult":
			id := m["toolCallId"].(string)
			if !inputTimes[fmt.Sprint(id, "@", m["timestamp"])] {
				m["timestamp"] = lastTime
				note(SyntheticResultTime)
			} else if !slices.Contains(open, id) || slices.Contains(answered, id) {
				note(OrphanToolResults)
				continue
			}
			answered = append(answered, id)
		}
		out = append(out, m)
	}
	return out
}

// Signed reports whether a pi assistant message (as JSON) carries a
// signature in any block: its replay state.
func Signed(m map[string]any) bool {
	for _, b := range m["content"].([]any) {
		b := b.(map[string]any)
		if b["thinkingSignature"] != nil || b["textSignature"] != nil || b["thoughtSignature"] != nil {
			return true
		}
	}
	return false
}

func hasThinking(m map[string]any) bool {
	return slices.ContainsFunc(m["content"].([]any), func(b any) bool { return b.(map[string]any)["type"] == "thinking" })
}
