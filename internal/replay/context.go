package replay

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// The context events change messages that are already in the transcript: a
// compaction replaces those before its first kept seq with a summary, an
// edit replaces or removes one message. The context is pi-coding-agent's:
// the last compaction's messages, the messages from its first kept seq up
// to it (without system messages), then every message after it, each with
// the latest edit of it applied to the message as the log holds it — an
// edit may bring back what an earlier one removed — and then pi-ai's
// transformMessages over that (pairing, synthetic results, held system
// messages: the emit steps).
//
// Most context events only need the context as it stands: they work on the
// transcript's raw context — its messages without the synthetic tool
// results, in seq order, which puts back a system message held behind open
// calls — and pass the changed context through the emit steps again; the
// cost is the context's, not the log's. Two need messages that are no
// longer in the context, and the builder reads the log again from where
// the context starts (Options.Reread) and builds it as pi does: an edit of
// a message an earlier edit removed, or one that gives an assistant message
// tool calls it does not have now (their results were left out with them),
// and a compaction that keeps from before where the context starts.

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

// ContextState is what a replay resumed at a turn boundary must know of the
// context events before it (Options.Context, Builder.ContextState): where
// the context starts, and which of its messages an edit left out.
type ContextState struct {
	// KeptFrom is the first seq the context holds messages from: the last
	// compaction's first kept seq, 0 before any.
	KeptFrom int64 `json:"keptFrom,omitempty"`
	// Removed are the seqs at or after KeptFrom whose latest edit left
	// their messages out, in the order they were left out.
	Removed []int64 `json:"removed,omitempty"`
	// Refused are the blocks the provider refused that replay reported,
	// the last maxRefusalsKept of them: a later response that reports one
	// again does not report it anew.
	Refused []Refusal `json:"refused,omitempty"`
	// Dropped are the refused blocks a target that drops them left out of
	// the transcript; a message the context gets again (from the log,
	// after a compaction or an edit, one that reaches back before the
	// context included) leaves them out again. A compaction does not
	// forget them: the provider refuses such a block wherever it is sent.
	Dropped []BlockRef `json:"dropped,omitempty"`
}

// ContextState returns where the context starts and what edits left out of
// it, for the next replay to resume with.
func (b *Builder) ContextState() ContextState {
	return ContextState{KeptFrom: b.ctx.KeptFrom, Removed: slices.Clone(b.ctx.Removed), Refused: slices.Clone(b.ctx.Refused),
		Dropped: slices.Clone(b.ctx.Dropped)}
}

// keepFrom moves the context's start to seq: what an edit left out before it
// is no longer in the context anyway.
func (s *ContextState) keepFrom(seq int64) {
	s.KeptFrom = seq
	s.Removed = slices.DeleteFunc(s.Removed, func(r int64) bool { return r < seq })
}

// forgetBlocks forgets what was refused of the message at seq, which an
// edit replaces: its new content is what is sent from now on.
func (s *ContextState) forgetBlocks(seq int64) {
	s.Refused = slices.DeleteFunc(s.Refused, func(r Refusal) bool { return r.Seq == seq })
	s.Dropped = slices.DeleteFunc(s.Dropped, func(r BlockRef) bool { return r.Seq == seq })
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
	prior, err := b.priorMessages()
	if err != nil {
		b.err = fmt.Errorf("read the stored transcript a context event changes: %w", err)
		return false
	}
	b.result.Messages = slices.Concat(prior, b.result.Messages)
	b.resumed = false
	b.result.Rebuilt = true
	b.prior = nil
	return true
}

// priorMessages reads the stored transcript (Options.Prior) once.
func (b *Builder) priorMessages() ([]Message, error) {
	if b.prior == nil {
		prior, err := b.opts.Prior()
		if err != nil {
			return nil, err
		}
		b.prior = slices.Clip(prior)
		if b.prior == nil {
			b.prior = []Message{}
		}
	}
	return b.prior, nil
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
		case roleInterrupted:
			b.settle()
		default:
			b.emitUser(m)
		}
	}
}

// roleInterrupted marks, in a context read from the log, where a response
// that never completed stood: it is no message, but like the aborted
// message pi-ai keeps for it, it ends the tool calls of the message before
// it (see addAssistant).
const roleInterrupted = "interrupted"

// compact replaces the transcript with the compaction's system message and
// summary, then the messages from its first kept seq on — but for system
// messages (the compaction's own holds the whole prompt and tool state)
// and an earlier compaction's messages. A compaction that keeps from before
// where the context starts brings back what an earlier one summarized, as
// pi-coding-agent follows the kept entry wherever it is: the context is
// then read from the log.
func (b *Builder) compact(it turnItem) {
	firstKept := *it.compaction.FirstKeptSeq
	if firstKept < b.ctx.KeptFrom {
		if b.rebuildFromLog(it, firstKept) {
			b.result.Context.CompactionSeq = it.seq
			b.result.Context.Compactions++
		}
		return
	}
	if !b.loadPrior() {
		return
	}
	kept := slices.DeleteFunc(b.rawContext(), func(m Message) bool {
		return m.Seq < firstKept || m.Seq >= it.seq || m.Role == "system" || m.Origin == OriginCompaction
	})
	b.restart(b.compactionMessages(it), kept)
	b.ctx.keepFrom(firstKept)
	b.result.Context.CompactionSeq = it.seq
	b.result.Context.Compactions++
}

// compactionMessages are the messages a compaction puts first: its system
// message (none on 0.73) and its summary.
func (b *Builder) compactionMessages(it turnItem) []Message {
	c := it.compaction
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
	return append(first, b.userMessage(Message{Seq: it.seq, Role: "user", Origin: OriginCompaction}, c.Content, it.time))
}

// replacement is an edit's new content, nil for an edit that leaves the
// message out.
func (it turnItem) replacement() *json.RawMessage {
	if string(it.edit.Replacement) == "null" {
		return nil
	}
	var r struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(it.edit.Replacement, &r); err != nil {
		panic(fmt.Sprintf("replay: decode the replacement of the edit at seq %d, which decoding checked: %v", it.seq, err))
	}
	return &r.Content
}

// applyEdit replaces the content of the messages of the edit's target, or
// leaves them out. A target with no message in the context (summarized,
// left out, or never a message) changes nothing, as in pi-coding-agent —
// but for a message an earlier edit left out, which pi brings back: the
// latest edit applies to the message as the log holds it.
func (b *Builder) applyEdit(it turnItem) {
	target := *it.edit.TargetSeq
	replacement := it.replacement()
	if target < b.ctx.KeptFrom {
		return
	}
	b.ctx.forgetBlocks(target)
	if slices.Contains(b.ctx.Removed, target) {
		if replacement != nil && b.rebuildFromLog(it, b.ctx.KeptFrom) {
			b.result.Context.Edits++
		}
		return
	}
	if !slices.ContainsFunc(b.result.Messages, func(m Message) bool { return m.Seq == target && !m.Synthetic }) &&
		!slices.ContainsFunc(b.open.Held, func(m Message) bool { return m.Seq == target }) && !b.resumed {
		return
	}
	if !b.loadPrior() {
		return
	}
	context := b.rawContext()
	if replacement != nil && b.bringsBackResults(context, target, *replacement) {
		if b.rebuildFromLog(it, b.ctx.KeptFrom) {
			b.result.Context.Edits++
		}
		return
	}
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
		out = append(out, b.edited(m, *replacement, it.seq, true))
	}
	if !changed {
		return
	}
	if replacement == nil {
		b.ctx.Removed = append(b.ctx.Removed, target)
	}
	b.restart(nil, out)
	b.result.Context.Edits++
}

// bringsBackResults reports whether an edit gives the assistant message at
// target a tool call it does not have now: the results of such a call were
// left out of the context, and only the log still holds them.
func (b *Builder) bringsBackResults(context []Message, target int64, replacement json.RawMessage) bool {
	var blocks []turnlog.ContentBlock
	if len(replacement) == 0 || replacement[0] != '[' || json.Unmarshal(replacement, &blocks) != nil {
		return false
	}
	for _, m := range context {
		if m.Seq != target || m.Role != "assistant" {
			continue
		}
		var a turnlog.AssistantMessage
		if err := a.UnmarshalJSON(m.Message); err != nil {
			panic(fmt.Sprintf("replay: decode the assistant message at seq %d it encoded: %v", m.Seq, err))
		}
		for _, c := range toolCalls(blocks) {
			if !slices.ContainsFunc(toolCalls(a.Content), func(have Call) bool { return have.ID == c.ID }) {
				return true
			}
		}
	}
	return false
}

// edited is m with an edit's replacement content, or m as it was when the
// replacement does not fit it (reported when report is set: the edit is
// being applied for the first time).
func (b *Builder) edited(m Message, replacement json.RawMessage, editSeq int64, report bool) Message {
	out, err := b.replaceContent(m, replacement)
	if err != nil {
		if report {
			b.diagnose(Diagnostic{Code: CodeInvalidContextEvent, Seq: editSeq,
				Message: fmt.Sprintf("the edit of seq %d cannot be applied: %v; seq %d is replayed as it was", m.Seq, err, m.Seq)})
		}
		return m
	}
	out.DroppedBlocks = nil
	return out
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
	if m.Origin == OriginCompaction {
		return m, nil // pi edits a compaction's messages away, never their content
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
