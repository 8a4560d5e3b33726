package turnspans

import (
	"encoding/json"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// The captured messages are JSON in the conventions' shape: a list of
// {role, parts, finish_reason?}, each part {type: text|reasoning|tool_call,
// ...}. Images are named by their type, never sent.

type message struct {
	Role         string `json:"role"`
	Parts        []part `json:"parts"`
	FinishReason string `json:"finish_reason,omitempty"`
}

type part struct {
	Type      string          `json:"type"`
	Content   string          `json:"content,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	MimeType  string          `json:"mime_type,omitempty"`
}

// userMessages are the turn's user messages; each content is pi-ai's: a
// string, content blocks, or null.
func userMessages(contents []json.RawMessage) string {
	msgs := make([]message, 0, len(contents))
	for _, c := range contents {
		m := message{Role: "user", Parts: []part{}}
		var text string
		var blocks []turnlog.ContentBlock
		switch {
		case json.Unmarshal(c, &text) == nil:
			m.Parts = append(m.Parts, part{Type: "text", Content: text})
		case json.Unmarshal(c, &blocks) == nil:
			for _, b := range blocks {
				m.Parts = append(m.Parts, blockPart(b.Type, b.Text, b.MimeType))
			}
		}
		msgs = append(msgs, m)
	}
	return encode(msgs)
}

func blockPart(kind, text, mimeType string) part {
	switch kind {
	case turnlog.BlockText:
		return part{Type: "text", Content: text}
	case turnlog.BlockThinking:
		return part{Type: "reasoning", Content: text}
	}
	return part{Type: kind, MimeType: mimeType}
}

// outputMessage is a response's message as the stream or the host gave it.
func outputMessage(r *response, stop turnlog.StopReason) string {
	m := message{Role: "assistant", Parts: []part{}, FinishReason: string(stop)}
	for _, n := range r.order {
		b := r.blocks[n]
		if b.kind != turnlog.BlockToolCall {
			m.Parts = append(m.Parts, blockPart(b.kind, string(b.text), ""))
			continue
		}
		p := part{Type: "tool_call", ID: b.id, Name: b.name}
		if json.Valid(b.text) {
			p.Arguments = b.text
		} else if len(b.text) > 0 {
			p.Content = string(b.text)
		}
		m.Parts = append(m.Parts, p)
	}
	return encode([]message{m})
}

func encode(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}
