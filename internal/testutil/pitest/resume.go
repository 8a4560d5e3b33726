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
	msgs := make([]map[string]any, len(transformed))
	for i, raw := range transformed {
		_ = json.Unmarshal(raw, &msgs[i])
	}
	nth := 0
	paired := Pair(msgs, func(m map[string]any) bool {
		return inputTimes[fmt.Sprint(m["toolCallId"], "@", m["timestamp"])]
	}, func(m map[string]any) {
		source := sources[nth]
		nth++
		if source["provider"] == target.Provider && source["model"] == target.Model && source["api"] == target.API &&
			!Signed(source) && hasThinking(m) {
			m["content"] = slices.DeleteFunc(m["content"].([]any), func(b any) bool { return b.(map[string]any)["type"] == "thinking" })
			note(NoStateThinking)
		}
	}, note)
	out := make([]any, len(paired))
	for i, m := range paired {
		out[i] = m
	}
	return out
}

// Pair is pi-ai's transformed messages paired as turnlog pairs tool
// results with their calls: a result pi was not given (given reports it)
// is the synthetic result of a call left open and has its call's time
// (SyntheticResultTime); a result answering no open call, or one answered
// already, stays out (OrphanToolResults). onAssistant sees each assistant
// message first, for the deviations a caller has of its own; note is told
// each deviation applied.
func Pair(msgs []map[string]any, given func(result map[string]any) bool, onAssistant func(m map[string]any), note func(deviation string)) []map[string]any {
	var out []map[string]any
	var open, answered []string // the last assistant message's call ids; those answered since
	var lastTime any
	for _, m := range msgs {
		switch m["role"] {
		case "assistant":
			onAssistant(m)
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
			if !given(m) {
				m["timestamp"] = lastTime
				if lastTime == nil {
					delete(m, "timestamp")
				}
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
