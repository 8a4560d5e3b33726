package replay

// Refused replay state: Anthropic binds a thinking block's signature to the
// model and to the conversation prefix it was produced under, and with
// thinking.block_binding.prefix_mismatch_behavior "drop_block" (what pi-ai
// 1.6 sends to models with managed effort) it drops a block that no longer
// matches and reports it in the response's input_transformations, by the
// block's path in the request: messages.{i}.content.{j}. pi-ai records
// that report on the assistant message the response produced (diagnostics,
// type anthropic_input_transformations) and keeps the blocks. This file
// reads the report and maps each path back to the transcript message and
// block it refused, by pi-ai's request building for anthropic-messages
// (buildParams, convertMessages, insertThinkingLevelMessages).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// CodeReplayStateRefused is the diagnostic of a block the provider refused:
// Seq is the refused message's seq, Cause the provider's reason.
const CodeReplayStateRefused = "REPLAY_STATE_REFUSED"

// CodeRefusalUnmapped is the diagnostic of a refusal whose path replay
// could not map to a transcript block: Seq is the seq of the response that
// reported it, Cause CauseUnmapped.
const CodeRefusalUnmapped = "REPLAY_STATE_REFUSAL_UNMAPPED"

// CauseUnmapped is the cause of a CodeRefusalUnmapped diagnostic.
const CauseUnmapped Cause = "unmapped"

// RefusalReasons are the reasons Anthropic gives for a dropped block; a
// CodeReplayStateRefused diagnostic's Cause is one of them, or
// CauseOtherReason for a reason not known here (its Message names it).
var RefusalReasons = []Cause{"prefix_binding_mismatch", "model_binding_mismatch", "organization_binding_mismatch", "end_user_binding_mismatch"}

// CauseOtherReason is the Cause of a refusal for a reason not in
// RefusalReasons.
const CauseOtherReason Cause = "other"

func refusalCause(reason string) Cause {
	if slices.Contains(RefusalReasons, Cause(reason)) {
		return Cause(reason)
	}
	return CauseOtherReason
}

// DiagnosticInputTransformations is the type of the assistant-message
// diagnostic in which pi-ai records Anthropic's input_transformations.
const DiagnosticInputTransformations = "anthropic_input_transformations"

// TransformationDropped is the input transformation of a block the provider
// removed from the request. thinking_mismatch_allowed, a block that failed a
// binding check and was shown to the model all the same, refuses nothing.
const TransformationDropped = "thinking_dropped"

// Transformation is one entry of a recorded input_transformations report.
type Transformation struct {
	Type   string `json:"type"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// RecordedTransformations returns the input transformations pi-ai recorded
// on an assistant message (its diagnostics of type
// anthropic_input_transformations), in order; nil if there are none or the
// member is not what pi-ai writes.
func RecordedTransformations(m *turnlog.AssistantMessage) []Transformation {
	return recordedTransformations[Transformation](m, DiagnosticInputTransformations)
}

// recordedTransformations returns the details.transformations of m's
// diagnostics of type typ, in order; nil if there are none or the member
// is not what pi-ai writes.
func recordedTransformations[T any](m *turnlog.AssistantMessage, typ string) []T {
	raw, ok := m.Extra["diagnostics"]
	if !ok {
		return nil
	}
	var diags []struct {
		Type    string `json:"type"`
		Details struct {
			Transformations []T `json:"transformations"`
		} `json:"details"`
	}
	if json.Unmarshal(raw, &diags) != nil {
		return nil
	}
	var out []T
	for _, d := range diags {
		if d.Type == typ {
			out = append(out, d.Details.Transformations...)
		}
	}
	return out
}

// AnthropicLayout are the options of pi-ai's anthropic-messages request
// building that move messages and blocks in the request.
type AnthropicLayout struct {
	// MidConvoSystem: the model takes system messages mid-conversation
	// (compat.supportsMidConvoSystemMessages). Without it every system
	// message is collapsed into the request's system prompt.
	MidConvoSystem bool
	// ToolChanges: the model takes tool_addition and tool_removal blocks
	// (compat.supportsMidConvoToolChanges); they are sent when the leading
	// system message adds tools.
	ToolChanges bool
	// EffortProvider, when not empty, is the provider of a model with
	// managed effort (compat.supportsMidConvoEffort, thinking not
	// disabled): an effort system message goes before each assistant
	// message of that provider on anthropic-messages with a known
	// providerThinkingLevel, and one at the end.
	EffortProvider string
}

// LayoutOf is the layout of the request that produced m, as far as the
// message tells: pi-ai sets providerThinkingLevel on a message exactly
// when its request carried effort messages, and pi-ai's catalog gives
// every model with managed effort mid-conversation system messages and
// tool changes. A message without it is read with the collapsed layout,
// which is that of every catalog model without managed effort but
// claude-opus-4-8 and claude-fable-5; those send no block_binding, so
// their providers drop no blocks.
func LayoutOf(m *turnlog.AssistantMessage) AnthropicLayout {
	var level string
	if raw, ok := m.Extra["providerThinkingLevel"]; ok && json.Unmarshal(raw, &level) == nil && level != "" {
		return AnthropicLayout{MidConvoSystem: true, ToolChanges: true, EffortProvider: m.Provider}
	}
	return AnthropicLayout{}
}

// BlockRef is a block of a transcript message: its Seq and the index of
// the block in its content.
type BlockRef struct {
	Seq   int64 `json:"seq"`
	Block int   `json:"block"`
}

// RequestLayout is where the blocks of a transcript's assistant messages
// are in the anthropic-messages request pi-ai builds from the transcript:
// for each request message, the transcript block each of its content
// blocks comes from (nil entries: a block of no assistant message, nil
// messages: a message that is not an assistant's).
type RequestLayout [][]*BlockRef

// Locate maps a path of the request (messages.{i}.content.{j}) to the
// assistant block it names, or says why it cannot.
func (l RequestLayout) Locate(path string) (BlockRef, error) {
	rest, ok := strings.CutPrefix(path, "messages.")
	is, js, ok2 := strings.Cut(rest, ".content.")
	if !ok || !ok2 {
		return BlockRef{}, fmt.Errorf("path %q is not messages.{i}.content.{j}", path)
	}
	i, err1 := strconv.Atoi(is)
	j, err2 := strconv.Atoi(js)
	if err1 != nil || err2 != nil || i < 0 || j < 0 {
		return BlockRef{}, fmt.Errorf("path %q is not messages.{i}.content.{j}", path)
	}
	if i >= len(l) {
		return BlockRef{}, fmt.Errorf("path %q: the request held %d messages", path, len(l))
	}
	if l[i] == nil {
		return BlockRef{}, fmt.Errorf("path %q: request message %d is not an assistant message", path, i)
	}
	if j >= len(l[i]) {
		return BlockRef{}, fmt.Errorf("path %q: request message %d held %d blocks", path, i, len(l[i]))
	}
	return *l[i][j], nil
}

type layoutTool struct {
	Name string `json:"name"`
}

type layoutBlock struct {
	Type              string `json:"type"`
	Text              string `json:"text"`
	Thinking          string `json:"thinking"`
	ThinkingSignature string `json:"thinkingSignature"`
	Redacted          bool   `json:"redacted"`
}

// BuildAnthropicLayout lays out the request pi-ai 1.x's anthropic-messages
// provider builds from a transcript (replay's messages for an
// anthropic-messages target), as buildParams does: the leading system
// message goes to the request's system prompt, later ones (with
// MidConvoSystem) wait for the next assistant message that converts to
// blocks, user messages with only blank text are left out, consecutive
// tool results become one user message, assistant messages keep their
// blocks but blank text and blank unsigned thinking (a message left with
// none is left out), and with managed effort the effort system messages
// are inserted. Message threads (a continued thread sends only the
// messages after the thread's prefix) are not laid out.
//
// A message's blocks that replay left out (Message.DroppedBlocks) are laid
// out as sent when withDropped is set: the request of a host that kept
// them, as pi does.
func BuildAnthropicLayout(msgs []Message, opts AnthropicLayout, withDropped bool) (RequestLayout, error) {
	var c layoutCache
	entries, err := c.entries(msgs)
	if err != nil {
		return nil, err
	}
	return layoutOf(entries, opts, withDropped), nil
}

// layoutEntry is what request building reads of one transcript message.
type layoutEntry struct {
	key  *byte // the first byte of the message's JSON: its identity
	seq  int64
	role string
	// system messages: whether it renders to text, whether it changes
	// tools when tool changes are native, whether it adds tools.
	text, toolChanges, addsTools bool
	// user messages: whether it converts to a request message.
	sent bool
	// assistant messages: the blocks sent, which blocks are thinking, and
	// the source and effort that place an effort message before it;
	// indexes count the blocks replay left out (dropped) too.
	blocks        []int
	dropped       []int
	thinking      []bool
	api, provider string
	effort        bool
}

// layoutCache holds the layout entries of a transcript's messages, so that
// a transcript that only grew since the last layout is decoded only where
// it grew: pi-ai keeps sending refused blocks, so every later response may
// report them again.
type layoutCache []layoutEntry

// entries returns the entries of msgs, decoding the messages that are not
// the ones the cache holds at their place.
func (c *layoutCache) entries(msgs []Message) ([]layoutEntry, error) {
	keep := 0
	for keep < len(*c) && keep < len(msgs) && (*c)[keep].key == messageKey(msgs[keep]) {
		keep++
	}
	*c = (*c)[:keep]
	for i := keep; i < len(msgs); i++ {
		e, err := describe(msgs[i])
		if err != nil {
			return nil, fmt.Errorf("transcript message %d (seq %d): %w", i, msgs[i].Seq, err)
		}
		*c = append(*c, e)
	}
	return *c, nil
}

// messageKey identifies a message by its JSON's first byte: replay encodes
// every message it changes anew.
func messageKey(m Message) *byte {
	if len(m.Message) == 0 {
		return nil
	}
	return &m.Message[0]
}

// describe decodes what request building reads of a message.
func describe(m Message) (layoutEntry, error) {
	var msg struct {
		Role                  string             `json:"role"`
		Content               json.RawMessage    `json:"content"`
		Sections              map[string]*string `json:"sections"`
		ToolsAdded            []layoutTool       `json:"toolsAdded"`
		ToolsRemoved          []layoutTool       `json:"toolsRemoved"`
		API                   string             `json:"api"`
		Provider              string             `json:"provider"`
		ProviderThinkingLevel any                `json:"providerThinkingLevel"`
	}
	if err := json.Unmarshal(m.Message, &msg); err != nil {
		return layoutEntry{}, err
	}
	e := layoutEntry{key: messageKey(m), seq: m.Seq, role: msg.Role}
	switch msg.Role {
	case "system":
		e.text = len(msg.Sections) > 0 || contentText(msg.Content) != ""
		e.toolChanges = toolChanges(msg.ToolsAdded, msg.ToolsRemoved)
		e.addsTools = len(msg.ToolsAdded) > 0
	case "user":
		e.sent = userSent(msg.Content)
	case "assistant":
		var blocks []layoutBlock
		if len(msg.Content) > 0 && string(msg.Content) != "null" {
			if err := json.Unmarshal(msg.Content, &blocks); err != nil {
				return layoutEntry{}, err
			}
		}
		// The entry counts blocks as the message was before replay left
		// refused ones out (Message.DroppedBlocks): a refused block was a
		// signed thinking block, sent.
		e.thinking = make([]bool, len(blocks)+len(m.DroppedBlocks))
		next := 0
		for j := range e.thinking {
			if slices.Contains(m.DroppedBlocks, j) {
				e.thinking[j] = true
				e.blocks = append(e.blocks, j)
				e.dropped = append(e.dropped, j)
				continue
			}
			if next == len(blocks) {
				return layoutEntry{}, fmt.Errorf("droppedBlocks %v do not fit %d blocks", m.DroppedBlocks, len(blocks))
			}
			b := blocks[next]
			next++
			e.thinking[j] = b.Type == turnlog.BlockThinking
			switch b.Type {
			case turnlog.BlockText:
				if blank(b.Text) {
					continue
				}
			case turnlog.BlockThinking:
				if !b.Redacted && blank(b.Thinking) && blank(b.ThinkingSignature) {
					continue
				}
			case turnlog.BlockToolCall:
			default:
				continue
			}
			e.blocks = append(e.blocks, j)
		}
		e.api, e.provider, e.effort = msg.API, msg.Provider, anthropicEffort(msg.ProviderThinkingLevel)
	}
	return e, nil
}

// layoutOf lays out the request built from the transcript's entries, the
// blocks replay left out sent if withDropped.
func layoutOf(entries []layoutEntry, opts AnthropicLayout, withDropped bool) RequestLayout {
	// resolveTranscript and getInitialSystemMessage: without mid-
	// conversation system messages, every system message is folded into
	// the leading one; either way the leading one is the system prompt.
	nativeTools := len(entries) > 0 && entries[0].role == "system" &&
		opts.MidConvoSystem && opts.ToolChanges && entries[0].addsTools
	var out RequestLayout
	var levels []bool // per request message: an assistant message with an effort marker
	pending := 0
	push := func(refs []*BlockRef, level bool) {
		out = append(out, refs)
		levels = append(levels, level)
	}
	for i := 0; i < len(entries); i++ {
		e := &entries[i]
		switch e.role {
		case "system":
			if i > 0 && opts.MidConvoSystem && (e.text || nativeTools && e.toolChanges) {
				pending++
			}
		case "user":
			if e.sent {
				push(nil, false)
			}
		case "assistant":
			refs := make([]*BlockRef, 0, len(e.blocks))
			for _, j := range e.blocks {
				if withDropped || !slices.Contains(e.dropped, j) {
					refs = append(refs, &BlockRef{Seq: e.seq, Block: j})
				}
			}
			if len(refs) == 0 {
				continue
			}
			for ; pending > 0; pending-- {
				push(nil, false)
			}
			push(refs, opts.EffortProvider != "" && e.api == "anthropic-messages" && e.provider == opts.EffortProvider && e.effort)
		case "toolResult":
			for i+1 < len(entries) && entries[i+1].role == "toolResult" {
				i++
			}
			push(nil, false)
		}
	}
	for ; pending > 0; pending-- {
		push(nil, false)
	}
	if opts.EffortProvider == "" {
		return out
	}
	withEffort := make(RequestLayout, 0, len(out)+1)
	for i, refs := range out {
		if levels[i] {
			withEffort = append(withEffort, nil)
		}
		withEffort = append(withEffort, refs)
	}
	return append(withEffort, nil)
}

// toolChanges reports whether a system message's tool changes convert to
// blocks when tool changes are native: an addition, or a removal of a tool
// it does not define again.
func toolChanges(added, removed []layoutTool) bool {
	if len(added) > 0 {
		return true
	}
	return len(removed) > 0
}

// contentText is pi-ai's contentText: a string, or the text blocks joined.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []layoutBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return ""
	}
	var texts []string
	for _, b := range blocks {
		if b.Type == turnlog.BlockText {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// userSent reports whether a user message converts to a request message:
// a string that is not blank, or a block that is not blank text.
func userSent(raw json.RawMessage) bool {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return !blank(s)
	}
	var blocks []layoutBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return false
	}
	for _, b := range blocks {
		if b.Type != turnlog.BlockText || !blank(b.Text) {
			return true
		}
	}
	return false
}

func anthropicEffort(v any) bool {
	switch v {
	case "low", "medium", "high", "xhigh", "max":
		return true
	}
	return false
}

// Refusal is a block the provider refused, by the provider's reason.
type Refusal struct {
	BlockRef
	Reason string `json:"reason"`
}

// maxRefusalsKept caps the refusals a replay remembers (ContextState.Refused)
// so that one reported again by a later response is not reported twice; past
// it the oldest are forgotten and may be reported again.
const maxRefusalsKept = 100

// readRefusals reports the blocks the provider refused in the request that
// produced m, the assistant message at seq, read from the report pi-ai
// recorded on m and mapped by the transcript so far (the messages before
// m). Only a message of the target's model on anthropic-messages is read:
// the transcript is the one its request was built from. A refusal already
// reported is not reported again.
func (b *Builder) readRefusals(seq int64, m *turnlog.AssistantMessage) {
	if !m.Adapter().SameModel(b.target) || b.target.Line() == turnlog.ReleaseLine073 {
		return
	}
	if openAIResponses(m.API) {
		b.readRemovals(seq, m)
		return
	}
	if m.API != "anthropic-messages" {
		return
	}
	transformations := RecordedTransformations(m)
	var dropped []Transformation
	for _, t := range transformations {
		if t.Type == TransformationDropped {
			dropped = append(dropped, t)
		}
	}
	if len(dropped) == 0 {
		return
	}
	unmapped := func(t Transformation, why string) {
		b.diagnose(Diagnostic{Code: CodeRefusalUnmapped, Seq: seq, Cause: CauseUnmapped,
			Message: fmt.Sprintf("%s dropped by %s (%s), reported at seq %d, not mapped: %s", t.Path, m.Provider, t.Reason, seq, why)})
	}
	transcript, err := b.transcriptSoFar()
	if err != nil {
		for _, t := range dropped {
			unmapped(t, err.Error())
		}
		return
	}
	entries, err := b.layouts.entries(transcript)
	// The request was built from the transcript as the host held it: pi
	// keeps every block; a host resuming from a transcript that drops them
	// sent it without.
	layout := layoutOf(entries, LayoutOf(m), !b.target.DropsRefused() || seq <= b.opts.SentKeptThrough)
	for _, t := range dropped {
		if err != nil {
			unmapped(t, err.Error())
			continue
		}
		ref, lerr := layout.Locate(t.Path)
		if lerr == nil {
			lerr = thinkingAt(entries, ref)
		}
		if lerr != nil {
			unmapped(t, lerr.Error())
			continue
		}
		b.refused(Refusal{BlockRef: ref, Reason: t.Reason}, refusalCause(t.Reason), m.Provider, "at "+t.Path, seq)
	}
}

// refused reports a refusal once, and leaves the block out for a target
// that drops refused blocks. where says where the report put the block.
func (b *Builder) refused(r Refusal, cause Cause, provider, where string, seq int64) {
	if slices.Contains(b.ctx.Refused, r) {
		return
	}
	b.ctx.Refused = append(b.ctx.Refused, r)
	if len(b.ctx.Refused) > maxRefusalsKept {
		b.ctx.Refused = slices.Delete(b.ctx.Refused, 0, len(b.ctx.Refused)-maxRefusalsKept)
	}
	// The outcome goes first: a summary keeps a diagnostic's first 150
	// bytes.
	outcome := "kept, as pi keeps it"
	if b.target.DropsRefused() {
		outcome = "left out of the transcript"
		if !b.drop(r.BlockRef) {
			outcome = "no longer in the transcript"
		}
	}
	b.diagnose(Diagnostic{Code: CodeReplayStateRefused, Seq: r.Seq, Cause: cause, ReportedAt: seq,
		Message: fmt.Sprintf("thinking block %d of seq %d %s: refused by %s (%s) %s, reported at seq %d",
			r.Block, r.Seq, outcome, provider, r.Reason, where, seq)})
}

// OpenAI's Responses API withholds replayed reasoning items from the model
// (from GPT-6.2 on: reasoning after an edit of earlier input, or created
// under another organization, end user or model) and lists them in the
// response's input_transformations by the item's id; pi-ai records them on
// the assistant message (diagnostics of type openai_input_transformations,
// turn_boundary removals left out) and keeps the items. pi-ai sends a
// thinking block's reasoning item as its thinkingSignature holds it, so the
// id names the block without a request layout.

// DiagnosticOpenAIInputTransformations is the type of the assistant-message
// diagnostic in which pi-ai records OpenAI's reasoning removals.
const DiagnosticOpenAIInputTransformations = "openai_input_transformations"

// Removal is one reasoning item OpenAI withheld, as pi-ai records it.
type Removal struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	Action string `json:"action"`
	Reason string `json:"reason"`
}

// openAIResponses reports whether api is one of pi-ai's OpenAI Responses
// providers, which record removals.
func openAIResponses(api string) bool {
	return api == "openai-responses" || api == "azure-openai-responses" || api == "openai-codex-responses"
}

// RecordedRemovals returns the reasoning removals pi-ai recorded on an
// assistant message, in order.
func RecordedRemovals(m *turnlog.AssistantMessage) []Removal {
	var out []Removal
	for _, t := range recordedTransformations[Removal](m, DiagnosticOpenAIInputTransformations) {
		if t.Type == "reasoning" && t.Action == "removed" {
			out = append(out, t)
		}
	}
	return out
}

// removalCause maps OpenAI's reason to the refusal reasons status counts:
// prefix_mismatch to prefix_binding_mismatch, model_mismatch to
// model_binding_mismatch, and so on; the diagnostic keeps OpenAI's own.
func removalCause(reason string) Cause {
	if what, ok := strings.CutSuffix(reason, "_mismatch"); ok {
		return refusalCause(what + "_binding_mismatch")
	}
	return CauseOtherReason
}

// readRemovals reports the thinking blocks whose reasoning items OpenAI
// withheld in the request that produced m, the assistant message at seq.
func (b *Builder) readRemovals(seq int64, m *turnlog.AssistantMessage) {
	removals := RecordedRemovals(m)
	if len(removals) == 0 {
		return
	}
	transcript, err := b.transcriptSoFar()
	for _, rm := range removals {
		where := fmt.Sprintf("as reasoning item %s", rm.ID)
		var ref BlockRef
		found := false
		if err == nil {
			ref, found = reasoningItem(transcript, rm.ID)
		}
		if !found {
			why := "no thinking block of the transcript holds that item"
			if err != nil {
				why = err.Error()
			}
			b.diagnose(Diagnostic{Code: CodeRefusalUnmapped, Seq: seq, Cause: CauseUnmapped,
				Message: fmt.Sprintf("reasoning item %s removed by %s (%s), reported at seq %d, not mapped: %s", rm.ID, m.Provider, rm.Reason, seq, why)})
			continue
		}
		b.refused(Refusal{BlockRef: ref, Reason: rm.Reason}, removalCause(rm.Reason), m.Provider, where, seq)
	}
}

// reasoningItem finds the thinking block whose signature is the reasoning
// item id, the last one first; its index counts the blocks a dropping
// target left out.
func reasoningItem(transcript []Message, id string) (BlockRef, bool) {
	needle := []byte(id) // inside the signature, a JSON string in the message
	for i := len(transcript) - 1; i >= 0; i-- {
		m := transcript[i]
		if m.Role != "assistant" || !bytes.Contains(m.Message, needle) {
			continue
		}
		var a turnlog.AssistantMessage
		if a.UnmarshalJSON(m.Message) != nil {
			continue
		}
		k := 0 // index counting the dropped blocks
		for _, c := range a.Content {
			for slices.Contains(m.DroppedBlocks, k) {
				k++
			}
			if c.Type == turnlog.BlockThinking && c.ThinkingSignature != "" {
				var item struct {
					ID string `json:"id"`
				}
				if json.Unmarshal([]byte(c.ThinkingSignature), &item) == nil && item.ID == id {
					return BlockRef{Seq: m.Seq, Block: k}, true
				}
			}
			k++
		}
	}
	return BlockRef{}, false
}

// drop leaves a refused block out of the transcript, for a target that
// drops refused blocks: the one block degrades, as unusable replay state
// does on pi-ai 1.x (another model's thinking is dropped), and the
// message's other blocks, signed ones included, are kept. It reports
// whether the transcript holds the message (a compaction may have left it
// out since).
func (b *Builder) drop(ref BlockRef) bool {
	if slices.Contains(b.ctx.Dropped, ref) {
		return true
	}
	if !b.loadPrior() {
		return false
	}
	i := slices.IndexFunc(b.result.Messages, func(m Message) bool { return m.Seq == ref.Seq && m.Role == "assistant" })
	if i < 0 {
		return false
	}
	b.ctx.Dropped = append(b.ctx.Dropped, ref)
	b.result.Messages[i] = b.withDrops(b.result.Messages[i])
	return true
}

// withDrops returns m without the blocks of it the context's Dropped
// names and m does not leave out yet.
func (b *Builder) withDrops(m Message) Message {
	if m.Role != "assistant" {
		return m
	}
	var add []int
	for _, r := range b.ctx.Dropped {
		if r.Seq == m.Seq && !slices.Contains(m.DroppedBlocks, r.Block) {
			add = append(add, r.Block)
		}
	}
	if len(add) == 0 {
		return m
	}
	var a turnlog.AssistantMessage
	if err := a.UnmarshalJSON(m.Message); err != nil {
		panic(fmt.Sprintf("replay: decode the assistant message at seq %d it encoded: %v", m.Seq, err))
	}
	// Indexes count the blocks as they were before any was left out: a
	// block's place now is its index less the dropped ones before it.
	keep := make([]bool, len(a.Content))
	for k := range keep {
		keep[k] = true
	}
	var dropped []int
	for _, j := range add {
		now := j
		for _, d := range m.DroppedBlocks {
			if d < j {
				now--
			}
		}
		if now < 0 || now >= len(a.Content) || a.Content[now].Type != turnlog.BlockThinking {
			// Not the block that was refused (the context was built
			// otherwise since): leave the message as it is.
			continue
		}
		keep[now] = false
		dropped = append(dropped, j)
	}
	if len(dropped) == 0 {
		return m
	}
	if env, err := turnlog.ParseReplayEnvelope(a.ReplayState); err == nil && env.HasBlocks && len(env.Blocks) == len(a.Content) {
		if pruned, err := env.KeepBlocks(keep); err == nil {
			a.ReplayState = pruned
		}
	}
	content := a.Content[:0:0]
	for k, c := range a.Content {
		if keep[k] {
			content = append(content, c)
		}
	}
	a.Content = content
	m.DroppedBlocks = slices.Sorted(slices.Values(slices.Concat(m.DroppedBlocks, dropped)))
	return encode(m, a)
}

// thinkingAt checks that ref names a thinking block of an assistant message
// of the transcript: what Anthropic drops. A path that lands elsewhere was
// not laid out as the provider's request was (a continued message thread
// sends only the messages after its prefix).
func thinkingAt(entries []layoutEntry, ref BlockRef) error {
	for _, e := range entries {
		if e.seq != ref.Seq || e.role != "assistant" {
			continue
		}
		if !e.thinking[ref.Block] {
			return fmt.Errorf("the path names block %d of seq %d, which is not thinking", ref.Block, ref.Seq)
		}
		return nil
	}
	return fmt.Errorf("the path names block %d of seq %d, which the transcript does not hold", ref.Block, ref.Seq)
}

// transcriptSoFar is the whole transcript the builder holds: for a replay
// resumed at a turn boundary, the stored transcript (Options.Prior, read
// once) before this replay's messages.
func (b *Builder) transcriptSoFar() ([]Message, error) {
	if !b.resumed {
		return b.result.Messages, nil
	}
	prior, err := b.priorMessages()
	if err != nil {
		return nil, err
	}
	return slices.Concat(prior, b.result.Messages), nil
}
