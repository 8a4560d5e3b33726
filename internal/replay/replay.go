// Package replay builds the model transcript of a session through a seq — what
// the next request, or a fork's first request, is built from — for a target
// adapter.
//
// The rules are pi-ai's transformMessages, which every pi-ai provider runs
// before it builds a request, so a transcript is what pi-ai itself would
// send. They changed between pi-ai's release lines, so a target names the
// line it follows (turnlog.Adapter.ReleaseLine): 1.x drops another model's
// thinking where 0.73 turns it into text, passes system messages on (held
// back behind a tool call's results) where 0.73 has none, and reads a null
// content as no blocks. docs/log-format.md lists the few deliberate
// deviations, and a test compares this package with each line's own code.
//
// Durable content is authoritative; replay state is fidelity metadata. An
// assistant message is replayed native (as pi-ai replays a message of the
// same provider, api and model) when it has usable replay state — a replay
// envelope, or pi-ai signatures inline on its blocks, as pi-ai and
// pi-coding-agent store messages — and it came from the target's provider,
// api and model; otherwise it is replayed foreign, with pi-ai's cross-model
// conversion. An envelope that cannot be used degrades that one message to
// foreign and is reported through Options.OnDiagnostic; replay never fails a
// session for it. Envelopes are checked on every assistant message that has
// one, whichever model wrote it, so a session's diagnostics list every
// message whose metadata is lost, not only those the current target would
// have replayed native.
//
// Assistant messages that stopped with error or aborted are left out. A tool
// call left without a result gets a synthetic error result, placed where
// pi-ai places it: after the real results that followed the call, just
// before the next user or assistant message (or at the end of the
// transcript); a message left out, and a response cut off, count as the
// next assistant message, as pi-ai's aborted messages do. A tool result
// that answers no open call is left out and counted
// (Counts.OrphanToolResults), where pi-ai keeps it: providers reject a
// result whose call is not in the request.
package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
	"unicode"

	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// Head, as Options.Through, replays the whole log.
const Head int64 = math.MaxInt64

// Mode is how an assistant message is replayed.
type Mode string

const (
	// Native replays the message as its provider produced it, signatures included.
	Native Mode = "native"
	// Foreign replays provider-neutral content: no signatures, thinking as text.
	Foreign Mode = "foreign"
)

// Cause says why replay state was unusable.
type Cause string

const (
	CauseKind      Cause = "kind"      // written by another adapter kind
	CauseVersion   Cause = "version"   // another envelope version, the legacy flat form included
	CauseMalformed Cause = "malformed" // not an envelope: wrong JSON types
	CauseShape     Cause = "shape"     // entries no longer match the content blocks
)

// CodeInvalidReplayState is the diagnostic code of a degraded message.
const CodeInvalidReplayState = "INVALID_REPLAY_STATE"

// Diagnostic reports what replay could not use as the log has it, by
// Code: a message degraded to foreign (CodeInvalidReplayState, with the
// Cause and the message's Seq), a context event replay could not apply
// (CodeInvalidContextEvent, no Cause, the event's Seq), a block the
// provider refused (CodeReplayStateRefused, the provider's reason as
// Cause, the refused message's Seq), or a refusal replay could not map to
// a block (CodeRefusalUnmapped, CauseUnmapped, the reporting response's
// Seq). Refusals degrade nothing unless the target drops refused blocks
// (turnlog.Adapter.DropsRefused): pi replays the refused blocks.
type Diagnostic struct {
	Code    string `json:"code"`
	Seq     int64  `json:"seq"`
	Cause   Cause  `json:"cause"`
	Message string `json:"message"`
	// ReportedAt, on a CodeReplayStateRefused diagnostic, is the seq of
	// the response whose report named the refused block: a fork cut
	// there or later keeps a block the provider already refused.
	ReportedAt int64 `json:"reportedAt,omitempty"`
}

// Options configure a replay.
type Options struct {
	// Target is the adapter the transcript is for. Empty fields default to
	// the log's session/start adapter; an empty Kind after that means pi-ai,
	// the only envelope kind this package reads, and an empty ReleaseLine
	// turnlog.DefaultReleaseLine.
	Target turnlog.Adapter
	// Through is the last seq replayed; Head for the whole log.
	Through int64
	// OnDiagnostic, if set, receives every diagnostic, each with its code.
	OnDiagnostic func(Diagnostic)
	// Open resumes a replay at a turn boundary: the tool calls a previous
	// replay of the log up to there left open (Builder.Checkpoint).
	Open OpenCalls
	// Prior, for a replay resumed at a turn boundary, returns the transcript
	// the previous replays stored (without Open's tail). It is called when
	// a compaction or a context edit changes what came before, and then
	// Result.Rebuilt is set, or to map the blocks a response reports its
	// provider refused (see readRefusals), which changes nothing stored.
	Prior func() ([]Message, error)
	// Context, for a replay resumed at a turn boundary, is where the
	// previous replay's context started and what edits left out of it
	// (Builder.ContextState).
	Context ContextState
	// Reread reads the log again: it returns the log's events from seq
	// from (or from earlier: those before from are skipped), and the
	// replay ranges over them as far as it needs. A context event that
	// needs messages no longer in the context (see "The context events" in
	// context.go) reads them through it; without it, such an event fails
	// the replay (Builder.Err).
	Reread func(from int64) turnlog.Events
	// SentKeptThrough, for a target that drops refused blocks, is the last
	// seq whose responses were requested with every block kept: a fork's
	// cut, through which the source's host (pi keeps every block) sent
	// them. Later responses were requested from the transcript as this
	// target stores it, without the blocks it dropped, and their reports
	// are laid out that way. 0: none.
	SentKeptThrough int64
}

// OpenCalls are the tool calls of the last assistant message of a
// transcript that may still get results: a later tool result answers one,
// and the next user or assistant message, or the end of the transcript,
// settles the rest with synthetic results. System messages that came while
// the calls were open wait behind them (pi-ai 1.x).
type OpenCalls struct {
	// Calls in the message's order; ids may repeat.
	Calls []Call `json:"calls,omitempty"`
	// Answered lists the ids answered so far. pi-ai tracks answers by id,
	// so one result answers every call with that id.
	Answered []string `json:"answered,omitempty"`
	// Seq and Time (Unix milliseconds) are the assistant message's; the
	// synthetic results carry them.
	Seq  int64 `json:"seq,omitempty"`
	Time int64 `json:"time,omitempty"`
	// Held are the system messages that came after the calls, in order:
	// they follow the calls' results, synthetic ones included.
	Held []Message `json:"held,omitempty"`
}

// Call is a tool call waiting for its result.
type Call struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// answered reports whether a result with id has been seen.
func (o *OpenCalls) answered(id string) bool { return slices.Contains(o.Answered, id) }

// Tail returns what a transcript that stops here ends with: the synthetic
// results that settle the calls still without a result, in call order, then
// the system messages held behind the calls.
func (o OpenCalls) Tail() []Message {
	var out []Message
	for _, c := range o.Calls {
		if o.answered(c.ID) {
			continue
		}
		raw, err := turnlog.ToolResultMessage{
			ToolCallID: c.ID, ToolName: c.Name,
			Content: json.RawMessage(`[{"type":"text","text":"No result provided"}]`), IsError: true,
			Timestamp: o.Time,
		}.MarshalJSON()
		if err != nil {
			panic(fmt.Sprintf("replay: encode the synthetic result of call %q at seq %d: %v", c.ID, o.Seq, err))
		}
		out = append(out, Message{Seq: o.Seq, Role: "toolResult", Synthetic: true, Message: raw})
	}
	return append(out, o.Held...)
}

// Message is one message of the transcript, a pi-ai message in JSON. Seq is
// the seq of the event it comes from: the response/finish of an assembled
// message, the assistant/message of a host-written one, and for a synthetic
// tool result the assistant message that made the call.
type Message struct {
	Seq       int64  `json:"seq"`
	Role      string `json:"role"`
	Replay    Mode   `json:"replay,omitempty"` // assistant messages only
	Synthetic bool   `json:"synthetic,omitempty"`
	// Origin is what made a user or system message that no one typed:
	// a context/message's origin, or OriginCompaction.
	Origin string `json:"origin,omitempty"`
	// DroppedBlocks, on an assistant message of a target that drops
	// refused blocks, are the blocks left out because the provider refused
	// them: their indexes in the content as replayed before (ascending).
	DroppedBlocks []int           `json:"droppedBlocks,omitempty"`
	Message       json.RawMessage `json:"message"`
}

// Counts summarise how the assistant messages were replayed. Degraded
// messages are counted in Foreign too. OrphanToolResults counts the tool
// results left out because they answer no open call.
type Counts struct {
	Native            int `json:"native"`
	Foreign           int `json:"foreign"`
	Degraded          int `json:"degraded"`
	OrphanToolResults int `json:"orphanToolResults"`
}

// Add adds the counts of another part of the same transcript.
func (c *Counts) Add(o Counts) {
	c.Native += o.Native
	c.Foreign += o.Foreign
	c.Degraded += o.Degraded
	c.OrphanToolResults += o.OrphanToolResults
}

// Result is a transcript.
type Result struct {
	// ThroughSeq is the last seq replayed: Options.Through, or the log's head
	// if that comes first; -1 for an empty log.
	ThroughSeq int64     `json:"throughSeq"`
	Messages   []Message `json:"messages"`
	Counts     Counts    `json:"counts"`
	// Context says what the transcript starts from and what changed it.
	Context ContextInfo `json:"context"`
	// Rebuilt, for a replay resumed with Options.Prior, says that Messages
	// are the whole transcript: a compaction or an edit changed what the
	// previous replays stored. Otherwise Messages follow those.
	Rebuilt bool `json:"-"`
}

// Transcript replays a log's events through opts.Through. It stops at the
// first error.
func Transcript(events turnlog.Events, opts Options) (Result, error) {
	b := NewBuilder(opts)
	for e, err := range events {
		if err != nil {
			return Result{}, err
		}
		if e.Seq > opts.Through {
			break
		}
		b.Add(&e)
	}
	res := b.Result()
	return res, b.Err()
}

// Builder replays a log event by event. Besides the transcript so far it
// holds only the open turn: its messages and its responses' streams.
type Builder struct {
	opts      Options
	target    turnlog.Adapter
	assembler *assembler.Assembler
	turn      turnMessages
	result    Result
	open      OpenCalls
	// resumed: the transcript before this replay is the stored one, to be
	// loaded through Options.Prior before anything changes it.
	resumed bool
	// prior is the stored transcript, once read while resumed.
	prior []Message
	// layouts describes the transcript's messages for the request layout
	// that maps refused blocks (readRefusals).
	layouts layoutCache
	err     error
	// ctx is where the context starts and what edits left out of it.
	ctx ContextState
	// collect, when set, makes the builder read the log into a projection
	// instead of a transcript (see rebuildFromLog).
	collect *projection
}

// NewBuilder starts a replay, at the start of the log or, with opts.Open,
// at a turn boundary.
func NewBuilder(opts Options) *Builder {
	return &Builder{
		opts:      opts,
		target:    opts.Target,
		assembler: assembler.New(turnlog.Adapter{}),
		result:    Result{ThroughSeq: -1, Messages: []Message{}, Context: ContextInfo{CompactionSeq: -1}},
		open:      opts.Open,
		resumed:   opts.Prior != nil,
		ctx: ContextState{KeptFrom: opts.Context.KeptFrom, Removed: slices.Clone(opts.Context.Removed),
			Refused: slices.Clone(opts.Context.Refused), Dropped: slices.Clone(opts.Context.Dropped)},
	}
}

// turnMessages are the messages of the open turn, in seq order. They wait for
// the turn's end because a host may write its own assistant/message for a
// response after the response/finish, and the host's message wins.
type turnMessages struct {
	items     []turnItem
	hostWrote map[int]bool // responses with a host-written message
}

type turnItem struct {
	seq  int64
	time int64 // Unix milliseconds, 0 when unknown
	role string

	// assistant messages
	response  int
	host      bool // written by the host, not assembled
	assistant *turnlog.AssistantMessage

	userContent json.RawMessage
	origin      string // context messages
	toolResult  turnlog.ToolResultEvent
	system      turnlog.SystemMessageEvent
	compaction  turnlog.Compaction
	edit        turnlog.ContextEdit
}

// Add consumes the next event; events must come in log order.
func (b *Builder) Add(e *turnlog.Event) {
	b.result.ThroughSeq = e.Seq
	out := b.assembler.Add(e)
	for _, p := range out.Partials {
		b.turn.addPartial(p)
	}
	switch e.Type {
	case turnlog.TypeSessionStart:
		p, _ := e.SessionStart()
		b.defaultTarget(p.Adapter)
	case turnlog.TypeUserMessage:
		p, _ := e.UserMessage()
		b.turn.items = append(b.turn.items, turnItem{seq: e.Seq, time: unixMilli(e.Time), role: "user", userContent: p.Content})
	case turnlog.TypeToolResult:
		p, _ := e.ToolResult()
		b.turn.items = append(b.turn.items, turnItem{seq: e.Seq, time: unixMilli(e.Time), role: "toolResult", toolResult: p})
	case turnlog.TypeResponseFinish:
		if m := out.Message; m != nil && !b.turn.hostWrote[m.Response] {
			b.turn.items = append(b.turn.items, turnItem{seq: m.Seq, role: "assistant", response: m.Response, assistant: &m.Message})
		}
	case turnlog.TypeAssistantMessage:
		p, _ := e.AssistantMessage()
		b.turn.replaceAssembled(p.Response)
		b.turn.items = append(b.turn.items, turnItem{seq: e.Seq, role: "assistant", response: p.Response, host: true, assistant: &p.Message})
	case turnlog.TypeSystemMessage:
		p, _ := e.SystemMessage()
		b.turn.items = append(b.turn.items, turnItem{seq: e.Seq, time: unixMilli(e.Time), role: "system", system: p})
	case turnlog.TypeContextMessage:
		p, _ := e.ContextMessage()
		b.turn.items = append(b.turn.items, turnItem{seq: e.Seq, time: unixMilli(e.Time), role: "context", userContent: p.Content, origin: p.Origin})
	case turnlog.TypeCompaction:
		p, _ := e.Compaction()
		b.turn.items = append(b.turn.items, turnItem{seq: e.Seq, time: unixMilli(e.Time), role: "compaction", compaction: p})
	case turnlog.TypeContextEdit:
		p, _ := e.ContextEdit()
		b.turn.items = append(b.turn.items, turnItem{seq: e.Seq, role: "edit", edit: p})
	case turnlog.TypeTurnEnd:
		b.flushTurn()
	}
}

// defaultTarget fills the target fields the caller left empty from the
// session's adapter.
func (b *Builder) defaultTarget(session turnlog.Adapter) {
	t := &b.target
	if t.Kind == "" {
		t.Kind = session.Kind
	}
	if t.API == "" {
		t.API = session.API
	}
	if t.Provider == "" {
		t.Provider = session.Provider
	}
	if t.Model == "" {
		t.Model = session.Model
	}
	if t.ReleaseLine == "" && turnlog.CheckReleaseLine(session.ReleaseLine) == nil {
		t.ReleaseLine = session.ReleaseLine
	}
}

// addPartial puts a response that never completed where it stopped. It
// stays out of the transcript, but like the aborted message pi-ai keeps for
// it, it ends the tool calls of the message before it, so a log means the
// same whether its host streamed the response or wrote the message.
func (t *turnMessages) addPartial(p assembler.Partial) {
	if t.hostWrote[p.Response] {
		return
	}
	i := len(t.items)
	for i > 0 && t.items[i-1].seq > p.Seq {
		i-- // a stream cut off is only known at its turn's end
	}
	t.items = slices.Insert(t.items, i, turnItem{seq: p.Seq, role: "assistant", response: p.Response,
		assistant: &turnlog.AssistantMessage{StopReason: turnlog.StopReasonAborted}})
}

// replaceAssembled drops the assembled message of a response the host wrote
// a message for.
func (t *turnMessages) replaceAssembled(response int) {
	if t.hostWrote == nil {
		t.hostWrote = map[int]bool{}
	}
	t.hostWrote[response] = true
	kept := t.items[:0]
	for _, it := range t.items {
		if it.role == "assistant" && it.response == response && !it.host {
			continue
		}
		kept = append(kept, it)
	}
	t.items = kept
}

// Result finishes the replay: the open turn's messages are added and tool
// calls still without a result get their synthetic results. Call it once,
// after the last Add.
func (b *Builder) Result() Result {
	b.flushTurn()
	b.settle()
	return b.result
}

// Checkpoint ends a replay that a later one resumes, after the last Add of a
// turn/end: the transcript so far without the synthetic results of the calls
// still open, and those calls, which a replay with Options.Open continues
// from. The results of a tool call can arrive in the turn after the call's,
// so the calls are settled only where a whole replay settles them; until
// then the transcript's reader appends OpenCalls.Unanswered. Call it once,
// instead of Result.
func (b *Builder) Checkpoint() (Result, OpenCalls) {
	b.flushTurn()
	return b.result, b.open
}

func (b *Builder) flushTurn() {
	for _, it := range b.turn.items {
		if b.collect != nil {
			b.collect.add(b, it)
			continue
		}
		switch it.role {
		case "assistant":
			b.addAssistant(it)
		case "toolResult":
			b.addToolResult(it)
		case "user", "context":
			b.emitUser(b.userMessage(Message{Seq: it.seq, Role: "user", Origin: it.origin}, it.userContent, it.time))
		case "system":
			b.addSystem(it)
		case "compaction":
			b.compact(it)
		case "edit":
			b.applyEdit(it)
		}
	}
	clear(b.turn.items) // keep the array for the next turn, not what it pointed to
	b.turn = turnMessages{items: b.turn.items[:0]}
}

// encode sets m's message to v's JSON.
func encode(m Message, v json.Marshaler) Message {
	raw, err := v.MarshalJSON()
	if err != nil {
		// Every value here was decoded from JSON or built from such values.
		panic(fmt.Sprintf("replay: encode %s message at seq %d: %v", m.Role, m.Seq, err))
	}
	m.Message = raw
	return m
}

func (b *Builder) userMessage(m Message, content json.RawMessage, time int64) Message {
	return encode(m, turnlog.UserMessage{Content: b.content(content), Timestamp: time})
}

func (b *Builder) addAssistant(it turnItem) {
	b.settle()
	if it.assistant.StopReason.Interrupted() {
		return // an incomplete response is not history the model should see
	}
	b.readRefusals(it.seq, it.assistant)
	msg, mode := b.convert(it.seq, *it.assistant)
	if mode == Native {
		b.result.Counts.Native++
	} else {
		b.result.Counts.Foreign++
	}
	b.emitAssistant(encode(Message{Seq: it.seq, Role: "assistant", Replay: mode}, msg), toolCalls(msg.Content), msg.Timestamp)
}

func toolCalls(content []turnlog.ContentBlock) []Call {
	var calls []Call
	for _, c := range content {
		if c.Type == turnlog.BlockToolCall {
			calls = append(calls, Call{ID: c.ID, Name: c.Name})
		}
	}
	return calls
}

func (b *Builder) addToolResult(it turnItem) {
	if !b.emitToolResult(b.toolResultMessage(it), it.toolResult.ToolCallID) {
		b.result.Counts.OrphanToolResults++
	}
}

func (b *Builder) toolResultMessage(it turnItem) Message {
	p := it.toolResult
	return encode(Message{Seq: it.seq, Role: "toolResult"}, turnlog.ToolResultMessage{
		ToolCallID: p.ToolCallID, ToolName: p.ToolName,
		Content: b.content(p.Content), Details: p.Details, Usage: p.Usage, NestedCalls: p.NestedCalls,
		IsError: p.IsError, Timestamp: it.time, DurationMs: p.DurationMs,
	})
}

// addSystem adds a system message. The 0.73 line has no system messages:
// a host on it sends the system prompt beside the messages.
func (b *Builder) addSystem(it turnItem) {
	if b.target.Line() == turnlog.ReleaseLine073 {
		return
	}
	b.emitSystem(b.systemMessage(Message{Seq: it.seq, Role: "system"}, it.system, it.time))
}

func (b *Builder) systemMessage(m Message, s turnlog.SystemMessageEvent, time int64) Message {
	return encode(m, turnlog.SystemMessage{Content: b.content(s.Content), Sections: s.Sections,
		ToolsAdded: s.ToolsAdded, ToolsRemoved: s.ToolsRemoved, Timestamp: time})
}

// The emit steps put messages that are ready — converted, encoded — into
// the transcript by pi-ai's pairing rules. A replay's first pass and a
// rebuild after a compaction or an edit both go through them.

// emitAssistant closes the open calls and opens the message's.
func (b *Builder) emitAssistant(m Message, calls []Call, time int64) {
	if len(b.ctx.Dropped) > 0 {
		m = b.withDrops(m)
	}
	b.settle()
	b.result.Messages = append(b.result.Messages, m)
	b.open = OpenCalls{Seq: m.Seq, Time: time, Calls: calls}
}

// emitToolResult adds a result that answers an open call, and reports
// whether it did.
func (b *Builder) emitToolResult(m Message, id string) bool {
	o := &b.open
	if o.answered(id) || !slices.ContainsFunc(o.Calls, func(c Call) bool { return c.ID == id }) {
		// Its call was left out (aborted, errored), settled already (a user
		// message came between), or answered already: a provider rejects
		// a result whose call is not in the request.
		return false
	}
	o.Answered = append(o.Answered, id)
	b.result.Messages = append(b.result.Messages, m)
	return true
}

// emitUser closes the open calls and adds a user message.
func (b *Builder) emitUser(m Message) {
	b.settle()
	b.result.Messages = append(b.result.Messages, m)
}

// emitSystem adds a system message where pi-ai 1.x puts it: in place, or,
// while the last assistant message's tool calls are open, after their
// results.
func (b *Builder) emitSystem(m Message) {
	if len(b.open.Calls) > 0 {
		b.open.Held = append(b.open.Held, m)
		return
	}
	b.result.Messages = append(b.result.Messages, m)
}

// content is a message's content as the target's line reads it: pi-ai 1.x
// reads a null content as no blocks, 0.73 passes it on.
func (b *Builder) content(raw json.RawMessage) json.RawMessage {
	if b.target.Line() != turnlog.ReleaseLine073 && string(raw) == "null" {
		return json.RawMessage("[]")
	}
	return raw
}

// settle closes the open calls, with a synthetic result for each call not
// answered, and lets the system messages held behind them in.
func (b *Builder) settle() {
	b.result.Messages = append(b.result.Messages, b.open.Tail()...)
	b.open = OpenCalls{}
}

// convert replays one assistant message native or foreign.
func (b *Builder) convert(seq int64, m turnlog.AssistantMessage) (turnlog.AssistantMessage, Mode) {
	if m.ReplayState == nil {
		// Inline signatures are pi-ai's own replay state.
		if signedInline(m.Content) && m.Adapter().SameModel(b.target) {
			return native(m, turnlog.ReplayEnvelope{}), Native
		}
		return b.foreign(m), Foreign
	}
	kind := b.target.Kind
	if kind == "" {
		kind = turnlog.EnvelopeKindPiAI
	}
	env, cause, why := inspect(m.ReplayState, m.Content, kind)
	if cause != "" {
		b.result.Counts.Degraded++
		b.diagnose(Diagnostic{Code: CodeInvalidReplayState, Seq: seq, Cause: cause, Message: why + "; replayed provider-neutral"})
		return b.foreign(m), Foreign
	}
	if !m.Adapter().SameModel(b.target) {
		return b.foreign(m), Foreign
	}
	return native(m, env), Native
}

// inspect decides whether replay state is usable by a reader of kind, and if
// not, why.
func inspect(raw json.RawMessage, content []turnlog.ContentBlock, kind string) (turnlog.ReplayEnvelope, Cause, string) {
	env, err := turnlog.ParseReplayEnvelope(raw)
	var perr *turnlog.EnvelopeError
	errors.As(err, &perr)
	if perr != nil && (perr.Field == "" || perr.Field == "kind" || perr.Field == "version") {
		return env, CauseMalformed, fmt.Sprintf("replay state is malformed: %v", perr)
	}
	switch {
	case env.Kind == "" && env.Version <= 1:
		return env, CauseVersion, "replay state is the legacy flat version-1 form; this reader needs a version-2 envelope"
	case env.Kind == "":
		return env, CauseMalformed, "replay state has no kind"
	case env.Kind != kind:
		return env, CauseKind, fmt.Sprintf("replay state of kind %q cannot be used by a %q adapter", env.Kind, kind)
	case env.Version != 2:
		return env, CauseVersion, fmt.Sprintf("replay state version %d; this reader reads version 2", env.Version)
	case perr != nil:
		return env, CauseMalformed, fmt.Sprintf("replay state is malformed: %v", perr)
	}
	if !env.HasBlocks {
		return env, "", ""
	}
	if len(env.Blocks) != len(content) {
		return env, CauseShape, fmt.Sprintf("replay state has %d block entries for %d content blocks", len(env.Blocks), len(content))
	}
	for i, entry := range env.Blocks {
		if !entry.IsNull() && entry.Type != content[i].Type {
			return env, CauseShape, fmt.Sprintf("replay state entry %d is for a %s block, content block %d is %s", i, entry.Type, i, content[i].Type)
		}
	}
	return env, "", ""
}

// signedInline reports whether a block carries a pi-ai signature.
func signedInline(content []turnlog.ContentBlock) bool {
	for i := range content {
		c := &content[i]
		if c.ThinkingSignature != "" || c.TextSignature != "" || c.ThoughtSignature != "" {
			return true
		}
	}
	return false
}

// native puts the envelope's signatures back on the blocks (an envelope's
// signature wins over one inline) and applies pi-ai's same-model rules:
// redacted and signed thinking is kept as is, empty unsigned thinking is
// dropped.
func native(m turnlog.AssistantMessage, env turnlog.ReplayEnvelope) turnlog.AssistantMessage {
	content := make([]turnlog.ContentBlock, 0, len(m.Content))
	for i, c := range m.Content {
		sig := ""
		if env.HasBlocks {
			sig = env.Blocks[i].Signature
		}
		switch c.Type {
		case turnlog.BlockThinking:
			if sig != "" {
				c.ThinkingSignature = sig
			}
			if !c.Redacted && c.ThinkingSignature == "" && blank(c.Thinking) {
				continue
			}
		case turnlog.BlockText:
			if sig != "" {
				c.TextSignature = sig
			}
		case turnlog.BlockToolCall:
			if sig != "" {
				c.ThoughtSignature = sig
			}
		}
		content = append(content, c)
	}
	m.Content = content
	return m
}

// foreign is pi-ai's cross-model conversion of the target's release line:
// every signature is dropped, as is the replay state that held them, and
// thinking is dropped (1.x: another model's reasoning read as text becomes
// part of the new model's own replies) or, on 0.73, becomes text (empty and
// redacted thinking is dropped).
func (b *Builder) foreign(m turnlog.AssistantMessage) turnlog.AssistantMessage {
	dropThinking := b.target.Line() != turnlog.ReleaseLine073
	content := make([]turnlog.ContentBlock, 0, len(m.Content))
	for _, c := range m.Content {
		switch c.Type {
		case turnlog.BlockThinking:
			if dropThinking || c.Redacted || blank(c.Thinking) {
				continue
			}
			c = turnlog.ContentBlock{Type: turnlog.BlockText, Text: c.Thinking}
		case turnlog.BlockText:
			c = turnlog.ContentBlock{Type: turnlog.BlockText, Text: c.Text}
		case turnlog.BlockToolCall:
			c.ThoughtSignature = ""
		}
		content = append(content, c)
	}
	m.Content = content
	m.ReplayState = nil
	return m
}

// blank reports whether s is empty after JavaScript's String.prototype.trim,
// the test pi-ai applies to thinking: it strips U+FEFF, which Go's
// strings.TrimSpace keeps, and keeps U+0085, which Go strips.
func blank(s string) bool {
	for _, r := range s {
		switch r {
		case '\t', '\n', '\v', '\f', '\r', '\u2028', '\u2029', '\ufeff':
		default:
			if !unicode.Is(unicode.Zs, r) {
				return false
			}
		}
	}
	return true
}

func unixMilli(rfc3339 string) int64 {
	t, err := time.Parse(time.RFC3339Nano, rfc3339)
	if err != nil {
		return 0
	}
	return t.UnixMilli()
}
