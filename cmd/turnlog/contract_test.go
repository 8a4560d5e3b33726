package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// checkContract checks the JSON output of an offline command against the
// shape the command promises: every member present, with its JSON type.
// Members beyond the contract are allowed.
func checkContract(t *testing.T, command string, v map[string]any) {
	t.Helper()
	switch command {
	case "assemble":
		members(t, v, "output", "messages:array", "diagnostics:array")
		for i, m := range items(v, "messages") {
			at := fmt.Sprintf("messages[%d]", i)
			members(t, m, at, "seq:int", "turn:int", "response:int", "message:object")
			assistantMessage(t, m["message"], at+".message")
		}
		for i, d := range items(v, "diagnostics") {
			members(t, d, fmt.Sprintf("diagnostics[%d]", i), "code:string", "seq:int", "message:string")
		}
	case "replay":
		members(t, v, "output", "throughSeq:int", "messages:array", "diagnostics:array")
		for i, m := range items(v, "messages") {
			at := fmt.Sprintf("messages[%d]", i)
			members(t, m, at, "seq:int", "role:string", "message:object")
			msg, _ := m["message"].(map[string]any)
			if msg["role"] != m["role"] {
				t.Errorf("%s: role %v, but the message's role is %v", at, m["role"], msg["role"])
			}
			_, hasMode := m["replay"]
			switch m["role"] {
			case "assistant":
				members(t, m, at, "replay:string")
				if !slices.Contains([]any{"native", "foreign"}, m["replay"]) {
					t.Errorf("%s: replay %v, want native or foreign", at, m["replay"])
				}
				assistantMessage(t, msg, at+".message")
			case "user":
				members(t, msg, at+".message", "content:array|string")
			case "toolResult":
				members(t, msg, at+".message", "toolCallId:string", "toolName:string", "content:array|string", "isError:bool")
			default:
				t.Errorf("%s: role %v, want user, assistant or toolResult", at, m["role"])
			}
			if hasMode && m["role"] != "assistant" {
				t.Errorf("%s: a %v message has a replay mode", at, m["role"])
			}
		}
		for i, d := range items(v, "diagnostics") {
			at := fmt.Sprintf("diagnostics[%d]", i)
			members(t, d, at, "code:string", "seq:int", "cause:string", "message:string")
			if d["code"] != "INVALID_REPLAY_STATE" || !slices.Contains([]any{"kind", "version", "malformed", "shape"}, d["cause"]) {
				t.Errorf("%s: code %v cause %v", at, d["code"], d["cause"])
			}
		}
	case "fork-point":
		members(t, v, "output", "atSeq:string", "anchorSeq:int", "cutSeq:int", "cutTurn:int", "cutReason:string")
	default:
		t.Fatalf("no contract for %q", command)
	}
}

// assistantMessage checks a pi-ai AssistantMessage.
func assistantMessage(t *testing.T, v any, at string) {
	t.Helper()
	members(t, v, at, "role:string", "content:array", "stopReason:string", "api:string", "provider:string", "model:string")
	if m, _ := v.(map[string]any); m != nil {
		if _, has := m["replayState"]; has {
			members(t, m, at, "replayState:object")
		}
		for i, b := range items(m, "content") {
			members(t, b, fmt.Sprintf("%s.content[%d]", at, i), "type:string")
		}
	}
}

// members checks that v is an object with each member of specs
// ("name:kind", kind one of int, string, bool, array, object, or several
// joined by |).
func members(t *testing.T, v any, at string, specs ...string) {
	t.Helper()
	obj, ok := v.(map[string]any)
	if !ok {
		t.Errorf("%s: want an object, got %T", at, v)
		return
	}
	for _, spec := range specs {
		name, kinds, _ := strings.Cut(spec, ":")
		value, present := obj[name]
		if !present {
			t.Errorf("%s: missing member %q", at, name)
			continue
		}
		if k := jsonKind(value); !slices.Contains(strings.Split(kinds, "|"), k) {
			t.Errorf("%s.%s: want %s, got %s %v", at, name, kinds, k, value)
		}
	}
}

func jsonKind(v any) string {
	switch v := v.(type) {
	case float64:
		if v == float64(int64(v)) {
			return "int"
		}
		return "number"
	case string:
		return "string"
	case bool:
		return "bool"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "null"
}

// items returns the objects of an array member; checkContract has already
// reported anything that is not an object.
func items(v map[string]any, name string) []map[string]any {
	var out []map[string]any
	arr, _ := v[name].([]any)
	for _, item := range arr {
		if m, ok := item.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
