package replay

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// The context events change messages that are already in the transcript: a
// compaction replaces those before its first kept seq with a summary, an
// edit replaces or removes one message. Both work on the transcript's raw
// context — its messages without the synthetic tool results, in seq order,
// which puts back a system message held behind open calls — and then pass
// the changed context through the emit steps again, so pairing, synthetic
// results and held system messages come out as a replay of the changed
// context would make them (pi-coding-agent builds the context, then pi-ai's
// transformMessages runs over it). The cost is the context's, not the log's.

// OriginCompaction is the Origin of the messages a compaction puts first:
// its system message and its summary.
const OriginCompaction = "compaction"

// CodeInvalidContextEvent is the diagnostic code of a context event that
// replay could not apply.
const CodeInvalidContextEvent = "INVALID_CONTEXT_EVENT"

// ContextInfo says what a transcript's context starts from and what changed
// it during the replay.
type ContextInfo struct {
	// CompactionSeq is the seq of the last compaction replayed, -1 if none.
	CompactionSeq int64 `json:"compactionSeq"`
	// Compactions and Edits count the compactions and the context edits
	// that changed the transcript during the replay.
	Compactions int `json:"compactions"`
	Edits       int `json:"edits"`
}

// Err reports a failure to read the stored transcript (Options.Prior) that
// a compaction or an edit needed. The Builder is unusable after it.
func (b *Builder) Err() error { return b.err }

// loadPrior puts the stored transcript before this replay's messages, once.
func (b *Builder) loadPrior() bool {
	if b.err != nil {
		return false
	}
	if !b.resumed {
		return true
	}
	prior, err := b.opts.Prior()
	if err != nil {
		b.err = fmt.Errorf("read the stored transcript a context event changes: %w", err)
		return false
	}
	b.result.Messages = slices.Concat(prior, b.result.Messages)
	b.resumed = false
	b.result.Rebuilt = true
	return true
}

// rawContext returns the transcript's messages without synthetic results,
// the held system messages included, in seq order — but for the messages
// of the compaction the context starts from, which come first: the ones it
// kept have lower seqs.
func (b *Builder) rawContext() []Message {
	all := slices.Concat(b.result.Messages, b.open.Held)
	raw := slices.DeleteFunc(all, func(m Message) bool { return m.Synthetic })
	slices.SortStableFunc(raw, func(x, y Message) int {
		switch cx, cy := x.Origin == OriginCompaction, y.Origin == OriginCompaction; {
		case cx && !cy:
			return -1
		case cy && !cx:
			return 1
		}
		switch {
		case x.Seq < y.Seq:
			return -1
		case x.Seq > y.Seq:
			return 1
		}
		return 0
	})
	return raw
}

// restart empties the transcript and passes context through the emit steps.
func (b *Builder) restart(first []Message, context []Message) {
	b.result.Messages = make([]Message, 0, len(first)+len(context))
	b.open = OpenCalls{}
	for _, m := range first {
		if m.Role == "system" {
			b.emitSystem(m)
		} else {
			b.emitUser(m)
		}
	}
	for _, m := range context {
		switch m.Role {
		case "assistant":
			var a turnlog.AssistantMessage
			if err := a.UnmarshalJSON(m.Message); err != nil {
				panic(fmt.Sprintf("replay: decode the assistant message at seq %d it encoded: %v", m.Seq, err))
			}
			b.emitAssistant(m, toolCalls(a.Content), a.Timestamp)
		case "toolResult":
			var r struct {
				ToolCallID string `json:"toolCallId"`
			}
			if err := json.Unmarshal(m.Message, &r); err != nil {
				panic(fmt.Sprintf("replay: decode the tool result at seq %d it encoded: %v", m.Seq, err))
			}
			b.emitToolResult(m, r.ToolCallID)
		case "system":
			b.emitSystem(m)
		default:
			b.emitUser(m)
		}
	}
}

// compact replaces the transcript with the compaction's system message and
// summary, then the messages from its first kept seq on — but for system
// messages (the compaction's own holds the whole prompt and tool state)
// and an earlier compaction's messages.
func (b *Builder) compact(it turnItem) {
	if !b.loadPrior() {
		return
	}
	c := it.compaction
	firstKept := *c.FirstKeptSeq
	kept := slices.DeleteFunc(b.rawContext(), func(m Message) bool {
		return m.Seq < firstKept || m.Seq >= it.seq || m.Role == "system" || m.Origin == OriginCompaction
	})
	var first []Message
	if len(c.SystemMessage) > 0 && b.target.Line() != turnlog.ReleaseLine073 {
		var s turnlog.SystemMessageEvent
		if err := json.Unmarshal(c.SystemMessage, &s); err != nil {
			panic(fmt.Sprintf("replay: decode the system message of the compaction at seq %d, which decoding checked: %v", it.seq, err))
		}
		if s.Content == nil {
			s.Content = json.RawMessage("null")
		}
		first = append(first, b.systemMessage(Message{Seq: it.seq, Role: "system", Origin: OriginCompaction}, s, it.time))
	}
	first = append(first, b.userMessage(Message{Seq: it.seq, Role: "user", Origin: OriginCompaction}, c.Content, it.time))
	b.restart(first, kept)
	b.result.Context.CompactionSeq = it.seq
	b.result.Context.Compactions++
}

// applyEdit replaces the content of the messages of the edit's target, or
// leaves them out. A target with no message in the context (summarized,
// left out, or never a message) changes nothing, as in pi-coding-agent.
func (b *Builder) applyEdit(it turnItem) {
	target := *it.edit.TargetSeq
	if !slices.ContainsFunc(b.result.Messages, func(m Message) bool { return m.Seq == target && !m.Synthetic }) &&
		!slices.ContainsFunc(b.open.Held, func(m Message) bool { return m.Seq == target }) && !b.resumed {
		return
	}
	if !b.loadPrior() {
		return
	}
	var replacement *json.RawMessage
	if string(it.edit.Replacement) != "null" {
		var r struct {
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(it.edit.Replacement, &r); err != nil {
			panic(fmt.Sprintf("replay: decode the replacement of the edit at seq %d, which decoding checked: %v", it.seq, err))
		}
		replacement = &r.Content
	}
	context := b.rawContext()
	changed := false
	out := context[:0]
	for _, m := range context {
		if m.Seq != target {
			out = append(out, m)
			continue
		}
		changed = true
		if replacement == nil {
			continue
		}
		edited, err := b.replaceContent(m, *replacement)
		if err != nil {
			b.diagnose(Diagnostic{Code: CodeInvalidContextEvent, Seq: it.seq,
				Message: fmt.Sprintf("the edit of seq %d cannot be applied: %v; seq %d is replayed as it was", target, err, target)})
			edited = m
		}
		out = append(out, edited)
	}
	if !changed {
		return
	}
	b.restart(nil, out)
	b.result.Context.Edits++
}

// diagnose reports a diagnostic through the one hook.
func (b *Builder) diagnose(d Diagnostic) {
	if b.opts.OnDiagnostic != nil {
		b.opts.OnDiagnostic(d)
	}
}

// replaceContent returns m with content in place of its own: a string is
// one text block on an assistant message or a tool result (pi-coding-agent's
// rule), and an edited assistant message is replayed again, without the
// replay state that described its old content.
func (b *Builder) replaceContent(m Message, content json.RawMessage) (Message, error) {
	textBlocks := func() json.RawMessage {
		if len(content) > 0 && content[0] == '"' {
			var s string
			_ = json.Unmarshal(content, &s)
			raw, _ := json.Marshal([]turnlog.ContentBlock{{Type: turnlog.BlockText, Text: s}})
			return raw
		}
		return content
	}
	switch m.Role {
	case "system":
		return m, nil // the prompt is not a message's content
	case "assistant":
		var a turnlog.AssistantMessage
		if err := a.UnmarshalJSON(m.Message); err != nil {
			return m, err
		}
		var blocks []turnlog.ContentBlock
		if err := json.Unmarshal(textBlocks(), &blocks); err != nil {
			return m, fmt.Errorf("replacement content: %w", err)
		}
		a.Content, a.ReplayState = blocks, nil
		mode := Foreign
		if signedInline(a.Content) && a.Adapter().SameModel(b.target) {
			a, mode = native(a, turnlog.ReplayEnvelope{}), Native
		} else {
			a = b.foreign(a)
		}
		m.Replay = mode
		return encode(m, a), nil
	case "toolResult":
		var r struct {
			ToolCallID  string          `json:"toolCallId"`
			ToolName    string          `json:"toolName"`
			Details     json.RawMessage `json:"details"`
			Usage       json.RawMessage `json:"usage"`
			NestedCalls json.RawMessage `json:"nestedCalls"`
			IsError     bool            `json:"isError"`
			Timestamp   int64           `json:"timestamp"`
			DurationMs  json.RawMessage `json:"durationMs"`
		}
		if err := json.Unmarshal(m.Message, &r); err != nil {
			return m, err
		}
		return encode(m, turnlog.ToolResultMessage{ToolCallID: r.ToolCallID, ToolName: r.ToolName, Content: textBlocks(),
			Details: r.Details, Usage: r.Usage, NestedCalls: r.NestedCalls, IsError: r.IsError, Timestamp: r.Timestamp, DurationMs: r.DurationMs}), nil
	default:
		var u struct {
			Timestamp int64 `json:"timestamp"`
		}
		if err := json.Unmarshal(m.Message, &u); err != nil {
			return m, err
		}
		return encode(m, turnlog.UserMessage{Content: content, Timestamp: u.Timestamp}), nil
	}
}
