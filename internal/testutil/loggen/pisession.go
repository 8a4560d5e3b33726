package loggen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// LongPiSession returns a pi-coding-agent session file (version 3) of
// turns turns of a coding agent's work, the shape test/pi/1/long-session.mjs
// writes with pi's own SessionManager: a system prompt, then per turn a
// question, signed reasoning with a text and a tool call, the tool's
// result and an answer — four context messages a turn, without
// compaction. `turnlog import --format pi-session` reads it.
func LongPiSession(turns int) []byte {
	s := piWriter{clock: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	s.line(map[string]any{"type": "session", "version": 3, "id": "01a30000-0000-7000-8000-00000000long",
		"timestamp": s.stamp(), "cwd": "/work/long"})
	s.message(map[string]any{"role": "system", "content": "You are a careful coding agent. " + piWords(60, 1), "timestamp": s.millis()})
	for t := 1; t <= turns; t++ {
		s.message(map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("Turn %d: %s", t, piWords(40, t))}},
			"timestamp": s.millis()})
		s.message(s.assistant([]any{
			map[string]any{"type": "thinking", "thinking": piWords(60, t+1), "thinkingSignature": fmt.Sprintf("sig-%d-%s", t, strings.Repeat("A", 120))},
			map[string]any{"type": "text", "text": piWords(20, t+2)},
			map[string]any{"type": "toolCall", "id": fmt.Sprintf("call_%d", t), "name": "read", "arguments": map[string]any{"path": fmt.Sprintf("src/file_%d.go", t%97)}},
		}, "toolUse"))
		s.message(map[string]any{"role": "toolResult", "toolCallId": fmt.Sprintf("call_%d", t), "toolName": "read",
			"content": []any{map[string]any{"type": "text", "text": piWords(80, t+3)}}, "isError": false, "timestamp": s.millis()})
		s.message(s.assistant([]any{map[string]any{"type": "text", "text": piWords(50, t+4)}}, "stop"))
	}
	return s.out.Bytes()
}

// piWords is long-session.mjs's words(n, salt).
func piWords(n, salt int) string {
	vocabulary := []string{"the", "parser", "fails", "on", "nil", "input", "in", "main.go", "after", "refactor"}
	out := make([]string, n)
	for i := range out {
		out[i] = vocabulary[(i*7+salt)%10]
	}
	return strings.Join(out, " ")
}

// piWriter writes a session file's entries, each the child of the last.
type piWriter struct {
	out    bytes.Buffer
	clock  time.Time
	n      int
	parent any // the last entry's id; JSON null before the first
}

func (s *piWriter) tick() time.Time {
	s.clock = s.clock.Add(time.Second)
	return s.clock
}

func (s *piWriter) stamp() string { return s.tick().Format("2006-01-02T15:04:05.000Z") }

func (s *piWriter) millis() int64 { return s.tick().UnixMilli() }

func (s *piWriter) line(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("loggen: encode a pi session entry: %v", err))
	}
	s.out.Write(data)
	s.out.WriteByte('\n')
}

func (s *piWriter) message(m map[string]any) {
	s.n++
	id := fmt.Sprintf("%08x", s.n)
	s.line(map[string]any{"type": "message", "id": id, "parentId": s.parent, "timestamp": s.stamp(), "message": m})
	s.parent = id
}

func (s *piWriter) assistant(content []any, stop string) map[string]any {
	usage := map[string]any{"input": 1200, "output": 300, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1500,
		"cost": map[string]any{"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}
	return map[string]any{"role": "assistant", "content": content, "api": Adapter.API, "provider": Adapter.Provider, "model": Adapter.Model,
		"usage": usage, "stopReason": stop, "timestamp": s.millis()}
}
