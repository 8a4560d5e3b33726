package compare

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// messageText is a pi-ai message's words (see Entry.Text) and, for a tool
// result, the tool's name.
func messageText(raw json.RawMessage) (text, toolName string) {
	var m struct {
		Content  json.RawMessage `json:"content"`
		ToolName string          `json:"toolName"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return "", ""
	}
	return ContentText(m.Content), m.ToolName
}

// ContentText is the words of pi-ai content, a string or blocks, as
// Entry.Text has them: what the session browser searches a user message
// by.
func ContentText(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var blocks []turnlog.ContentBlock
	if json.Unmarshal(content, &blocks) != nil {
		return ""
	}
	return blocksText(blocks)
}

// blocksText joins the text of blocks and their tool calls; thinking
// counts only when there is nothing else, marked as such.
func blocksText(blocks []turnlog.ContentBlock) string {
	var words, thinking []string
	for _, b := range blocks {
		switch b.Type {
		case turnlog.BlockText:
			words = append(words, b.Text)
		case turnlog.BlockToolCall:
			words = append(words, "→ "+b.Name+" "+compactJSON(b.Arguments))
		case turnlog.BlockThinking:
			if !b.Redacted {
				thinking = append(thinking, b.Thinking)
			}
		case turnlog.BlockImage:
			words = append(words, "[image]")
		}
	}
	if len(words) == 0 && len(thinking) > 0 {
		return "(thinking) " + strings.Join(thinking, " ")
	}
	return strings.Join(words, " ")
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
