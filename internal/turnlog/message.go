package turnlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// Content block types of pi-ai.
const (
	BlockText     = "text"
	BlockThinking = "thinking"
	BlockToolCall = "toolCall"
	BlockImage    = "image"
)

// ContentBlock is one pi-ai content block. Only the fields of its Type are
// encoded; members this version does not know are kept in Extra and written
// back, so a block from a newer host survives replay.
type ContentBlock struct {
	Type string

	// text
	Text          string
	TextSignature string

	// thinking; a redacted block carries opaque provider data
	Thinking          string
	ThinkingSignature string
	Redacted          bool

	// toolCall; Arguments is a JSON object
	ID               string
	Name             string
	Arguments        json.RawMessage
	ThoughtSignature string

	// image
	Data     string
	MimeType string

	Extra map[string]json.RawMessage
}

// UnmarshalJSON decodes a block of any type; the members of Type must have
// their pi-ai JSON types.
func (b *ContentBlock) UnmarshalJSON(data []byte) error {
	members, err := objectMembers(data)
	if err != nil {
		return err
	}
	*b = ContentBlock{}
	rawType, ok := members["type"]
	if !ok {
		return fieldErrorf("type", "missing")
	}
	if err := decodeString(rawType, "type", &b.Type); err != nil {
		return err
	}
	for _, key := range slices.Sorted(maps.Keys(members)) {
		if key == "type" {
			continue
		}
		raw := members[key]
		var err error
		switch b.Type + "." + key {
		case BlockText + ".text":
			err = decodeString(raw, key, &b.Text)
		case BlockText + ".textSignature":
			err = decodeString(raw, key, &b.TextSignature)
		case BlockThinking + ".thinking":
			err = decodeString(raw, key, &b.Thinking)
		case BlockThinking + ".thinkingSignature":
			err = decodeString(raw, key, &b.ThinkingSignature)
		case BlockThinking + ".redacted":
			err = decodeBool(raw, key, &b.Redacted)
		case BlockToolCall + ".id":
			err = decodeString(raw, key, &b.ID)
		case BlockToolCall + ".name":
			err = decodeString(raw, key, &b.Name)
		case BlockToolCall + ".arguments":
			if jsonKind(raw) != "an object" {
				err = fieldErrorf(key, "want an object, got %s", jsonKind(raw))
			}
			b.Arguments = raw
		case BlockToolCall + ".thoughtSignature":
			err = decodeString(raw, key, &b.ThoughtSignature)
		case BlockImage + ".data":
			err = decodeString(raw, key, &b.Data)
		case BlockImage + ".mimeType":
			err = decodeString(raw, key, &b.MimeType)
		default:
			if b.Extra == nil {
				b.Extra = map[string]json.RawMessage{}
			}
			b.Extra[key] = raw
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// MarshalJSON encodes the block's own fields in pi-ai's order, then Extra in
// key order, so the same block always encodes to the same bytes.
func (b ContentBlock) MarshalJSON() ([]byte, error) {
	var o objectWriter
	b.encode(&o)
	return o.buf, o.err
}

func (b *ContentBlock) encode(o *objectWriter) {
	o.open()
	o.string("type", b.Type)
	switch b.Type {
	case BlockText:
		o.string("text", b.Text)
		o.optString("textSignature", b.TextSignature)
	case BlockThinking:
		o.string("thinking", b.Thinking)
		o.optString("thinkingSignature", b.ThinkingSignature)
		if b.Redacted {
			o.bool("redacted", true)
		}
	case BlockToolCall:
		o.string("id", b.ID)
		o.string("name", b.Name)
		args := b.Arguments
		if len(args) == 0 {
			args = []byte("{}")
		}
		o.raw("arguments", args)
		o.optString("thoughtSignature", b.ThoughtSignature)
	case BlockImage:
		o.string("data", b.Data)
		o.string("mimeType", b.MimeType)
	}
	o.extra(b.Extra)
	o.close()
}

// AssistantMessage is pi-ai's AssistantMessage, plus the replay state turnlog
// stores beside its content. Unknown members are kept in Extra.
type AssistantMessage struct {
	Content      []ContentBlock
	API          string
	Provider     string
	Model        string
	Usage        json.RawMessage
	StopReason   StopReason
	ErrorMessage string
	// Timestamp is Unix milliseconds; 0 when unknown.
	Timestamp   int64
	ReplayState json.RawMessage
	Extra       map[string]json.RawMessage
}

// Adapter returns the api, provider and model the message came from.
func (m *AssistantMessage) Adapter() Adapter {
	return Adapter{API: m.API, Provider: m.Provider, Model: m.Model}
}

// UnmarshalJSON decodes a message; content must be an array of blocks.
func (m *AssistantMessage) UnmarshalJSON(data []byte) error {
	members, err := objectMembers(data)
	if err != nil {
		return err
	}
	*m = AssistantMessage{}
	if _, ok := members["content"]; !ok {
		return fieldErrorf("content", "missing")
	}
	for _, key := range slices.Sorted(maps.Keys(members)) {
		raw := members[key]
		var err error
		switch key {
		case "role":
			var role string
			if err = decodeString(raw, key, &role); err == nil && role != "assistant" {
				err = fieldErrorf(key, "want \"assistant\", got %q", role)
			}
		case "content":
			// pi-ai 1.x reads a null content as no blocks (0.73 throws).
			if !bytes.Equal(raw, []byte("null")) {
				err = decodeBlocks(raw, &m.Content)
			}
		case "api":
			err = decodeString(raw, key, &m.API)
		case "provider":
			err = decodeString(raw, key, &m.Provider)
		case "model":
			err = decodeString(raw, key, &m.Model)
		case "usage":
			m.Usage = raw
		case "stopReason":
			var s string
			err = decodeString(raw, key, &s)
			m.StopReason = StopReason(s)
		case "errorMessage":
			err = decodeString(raw, key, &m.ErrorMessage)
		case "timestamp":
			m.Timestamp, err = strconv.ParseInt(string(raw), 10, 64)
			if err != nil {
				err = fieldErrorf(key, "want an integer (Unix milliseconds), got %s", raw)
			}
		case "replayState":
			if !bytes.Equal(raw, []byte("null")) {
				m.ReplayState = raw
			}
		default:
			if m.Extra == nil {
				m.Extra = map[string]json.RawMessage{}
			}
			m.Extra[key] = raw
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// MarshalJSON encodes the message in pi-ai's member order, then Extra in key
// order.
func (m AssistantMessage) MarshalJSON() ([]byte, error) {
	size := 192 + len(m.Usage) + len(m.ReplayState)
	for i := range m.Content {
		c := &m.Content[i]
		size += 64 + len(c.Text) + len(c.TextSignature) + len(c.Thinking) + len(c.ThinkingSignature) + len(c.Arguments) + len(c.ThoughtSignature) + len(c.Data)
	}
	o := objectWriter{buf: make([]byte, 0, size)}
	o.open()
	o.string("role", "assistant")
	o.key("content")
	o.buf = append(o.buf, '[')
	for i := range m.Content {
		if i > 0 {
			o.buf = append(o.buf, ',')
		}
		m.Content[i].encode(&o)
	}
	o.buf = append(o.buf, ']')
	o.string("api", m.API)
	o.string("provider", m.Provider)
	o.string("model", m.Model)
	if len(m.Usage) > 0 {
		o.raw("usage", m.Usage)
	}
	o.string("stopReason", string(m.StopReason))
	o.optString("errorMessage", m.ErrorMessage)
	o.optInt("timestamp", m.Timestamp)
	if len(m.ReplayState) > 0 {
		o.raw("replayState", m.ReplayState)
	}
	o.extra(m.Extra)
	o.close()
	return o.buf, o.err
}

// UserMessage is pi-ai's UserMessage. Content (blocks, or a string) is kept
// as written.
type UserMessage struct {
	Content json.RawMessage
	// Timestamp is Unix milliseconds; 0 when unknown.
	Timestamp int64
}

// MarshalJSON encodes the message in pi-ai's member order.
func (m UserMessage) MarshalJSON() ([]byte, error) {
	o := objectWriter{buf: make([]byte, 0, 64+len(m.Content))}
	o.open()
	o.string("role", "user")
	o.raw("content", m.Content)
	o.optInt("timestamp", m.Timestamp)
	o.close()
	return o.buf, o.err
}

// ToolResultMessage is pi-ai's ToolResultMessage. Content and the tool
// run's record (Details, Usage, NestedCalls, DurationMs) are kept as
// written.
type ToolResultMessage struct {
	ToolCallID  string
	ToolName    string
	Content     json.RawMessage
	Details     json.RawMessage
	Usage       json.RawMessage
	NestedCalls json.RawMessage
	IsError     bool
	// Timestamp is Unix milliseconds; 0 when unknown.
	Timestamp  int64
	DurationMs json.RawMessage
}

// MarshalJSON encodes the message in pi-ai's member order.
func (m ToolResultMessage) MarshalJSON() ([]byte, error) {
	o := objectWriter{buf: make([]byte, 0, 128+len(m.ToolCallID)+len(m.ToolName)+len(m.Content)+len(m.Details)+len(m.Usage)+len(m.NestedCalls))}
	o.open()
	o.string("role", "toolResult")
	o.string("toolCallId", m.ToolCallID)
	o.string("toolName", m.ToolName)
	o.raw("content", m.Content)
	o.optRaw("details", m.Details)
	o.optRaw("usage", m.Usage)
	o.optRaw("nestedCalls", m.NestedCalls)
	o.bool("isError", m.IsError)
	o.optInt("timestamp", m.Timestamp)
	o.optRaw("durationMs", m.DurationMs)
	o.close()
	return o.buf, o.err
}

// SystemMessage is pi-ai 1.x's SystemMessage: instructions and tool
// declarations from one point of the transcript on. Every member is kept
// as written.
type SystemMessage struct {
	Content      json.RawMessage
	Sections     json.RawMessage
	ToolsAdded   json.RawMessage
	ToolsRemoved json.RawMessage
	// Timestamp is Unix milliseconds; 0 when unknown.
	Timestamp int64
}

// MarshalJSON encodes the message in pi-ai's member order.
func (m SystemMessage) MarshalJSON() ([]byte, error) {
	o := objectWriter{buf: make([]byte, 0, 64+len(m.Content)+len(m.Sections)+len(m.ToolsAdded)+len(m.ToolsRemoved))}
	o.open()
	o.string("role", "system")
	o.raw("content", m.Content)
	o.optRaw("sections", m.Sections)
	o.optRaw("toolsAdded", m.ToolsAdded)
	o.optRaw("toolsRemoved", m.ToolsRemoved)
	o.optInt("timestamp", m.Timestamp)
	o.close()
	return o.buf, o.err
}

func decodeBlocks(raw json.RawMessage, out *[]ContentBlock) error {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || raw[0] != '[' {
		return fieldErrorf("content", "want an array of blocks, got %s", jsonKind(raw))
	}
	blocks := make([]ContentBlock, len(items))
	for i, item := range items {
		if err := blocks[i].UnmarshalJSON(item); err != nil {
			return prefixField(fmt.Sprintf("content[%d]", i), err)
		}
	}
	*out = blocks
	return nil
}
