// Package assembler turns the streamed chunks of a response and its
// response/finish into a durable pi-ai assistant message.
//
// Assembly makes one keep/drop decision per emitted block (keep) and applies
// it to the content blocks and to the replay envelope's per-block entries
// together, so a transformation can never leave metadata describing blocks
// that are no longer there: that mismatch once made every later request of a
// session fail. An envelope that does not line up with the emitted blocks is
// discarded whole rather than published with misattributed signatures.
//
// Assembly is a pure function of the events: the same events give the same
// messages, byte for byte.
package assembler

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Diagnostic codes.
const (
	// CodeEnvelopeMisaligned: the envelope's entries do not line up with the
	// emitted blocks; the envelope was discarded and the message stored
	// without replay state.
	CodeEnvelopeMisaligned = "ENVELOPE_MISALIGNED"
	// CodeInvalidToolArguments: a kept tool call's arguments are not a JSON
	// object; the call was kept with {} as its arguments.
	CodeInvalidToolArguments = "INVALID_TOOL_ARGUMENTS"
	// CodeUnknownBlockType: a block of a type this version cannot assemble
	// was dropped (with its envelope entry).
	CodeUnknownBlockType = "UNKNOWN_BLOCK_TYPE"
	// CodeInconsistentStream: an event contradicts the stream so far (a chunk
	// after the finish, a second finish, a block changing type); it was ignored.
	CodeInconsistentStream = "INCONSISTENT_STREAM"
	// CodeMessageTooLarge: a response streamed more than MaxMessageBytes;
	// its content was not kept, and its message holds a text block saying so.
	CodeMessageTooLarge = "MESSAGE_TOO_LARGE"
)

// MaxMessageBytes bounds what assembly holds of one response: the text,
// thinking and tool arguments its chunks stream. A response that streams
// more (no model answers with megabytes; a host that loops might) is a data
// error for that message, not a reason for a worker to run out of memory:
// its chunks past the bound are counted, not kept. Encoded as JSON, a
// message of this size stays well within what a transcript part may hold.
const MaxMessageBytes = 8 << 20

// Diagnostic reports something assembly did about an event.
type Diagnostic struct {
	Code    string `json:"code"`
	Seq     int64  `json:"seq"`
	Message string `json:"message"`
}

// Assembled is the assistant message of one response. Seq is the seq of its
// response/finish.
type Assembled struct {
	Seq      int64                    `json:"seq"`
	Turn     int64                    `json:"turn"`
	Response int                      `json:"response"`
	Message  turnlog.AssistantMessage `json:"message"`
}

// Partial is the frozen partial text of a response that never completed: no
// response/finish before its turn ended (StopReason empty), or a finish with
// stopReason aborted or error. A UI may show it; it never becomes an
// assistant message. Seq is the response's last event.
type Partial struct {
	Seq        int64                  `json:"seq"`
	Turn       int64                  `json:"turn"`
	Response   int                    `json:"response"`
	StopReason turnlog.StopReason     `json:"stopReason,omitempty"`
	Content    []turnlog.ContentBlock `json:"content"`
}

// Output is what one event produced.
type Output struct {
	Message     *Assembled
	Partials    []Partial
	Diagnostics []Diagnostic
}

// Result is the assembly of a whole log.
type Result struct {
	Messages    []Assembled  `json:"messages"`
	Partials    []Partial    `json:"partials"`
	Diagnostics []Diagnostic `json:"diagnostics"`
}

func (r *Result) add(o Output) {
	if o.Message != nil {
		r.Messages = append(r.Messages, *o.Message)
	}
	r.Partials = append(r.Partials, o.Partials...)
	r.Diagnostics = append(r.Diagnostics, o.Diagnostics...)
}

func newResult() Result {
	return Result{Messages: []Assembled{}, Partials: []Partial{}, Diagnostics: []Diagnostic{}}
}

// AssembleLog assembles every response of a log held in memory. Responses
// still streaming at the end are reported as partial.
func AssembleLog(events []turnlog.Event) Result {
	res := newResult()
	a := New(turnlog.Adapter{})
	for i := range events {
		res.add(a.Add(&events[i]))
	}
	res.add(a.Flush())
	return res
}

// Assemble assembles every response of a log's events, holding only the
// open turn's stream in memory. It stops at the first error.
func Assemble(events turnlog.Events) (Result, error) {
	res := newResult()
	a := New(turnlog.Adapter{})
	for e, err := range events {
		if err != nil {
			return Result{}, err
		}
		res.add(a.Add(&e))
	}
	res.add(a.Flush())
	return res, nil
}

// Assembler assembles a log event by event, holding only the responses of
// the open turn. Responses never span turns, so assembly can start at any
// turn/start, e.g. from a checkpoint.
type Assembler struct {
	session   turnlog.Adapter
	responses []*response // of the open turn, in start order
	// byNumber finds a response of the open turn by its number: a turn may
	// hold any number of them, and a scan per event would make assembly
	// quadratic.
	byNumber map[responseKey]*response

	// spare holds the text buffers of blocks already assembled, for the
	// blocks of later responses: a block grows by one chunk at a time, and
	// reusing buffers spares every response the same series of regrowths.
	spare [][]byte
}

// New returns an Assembler. session is the adapter of responses that do not
// name one; a session/start event replaces it.
func New(session turnlog.Adapter) *Assembler {
	return &Assembler{session: session}
}

// Add consumes the next event of the log.
func (a *Assembler) Add(e *turnlog.Event) Output {
	switch e.Type {
	case turnlog.TypeSessionStart:
		p, _ := e.SessionStart()
		a.session = p.Adapter
	case turnlog.TypeTurnStart:
		return a.Flush() // a turn left open (a broken log) freezes what it streamed
	case turnlog.TypeResponseStart:
		p, _ := e.ResponseStart()
		if a.find(e.Turn, p.Response) != nil {
			return diagnostic(CodeInconsistentStream, e.Seq, "response %d of turn %d started twice; the second start is ignored", p.Response, e.Turn)
		}
		r := a.start(e, p.Response)
		if p.Adapter != (turnlog.Adapter{}) {
			r.adapter = p.Adapter
		}
	case turnlog.TypeChunk:
		p, _ := e.Chunk()
		return a.chunk(e, p)
	case turnlog.TypeResponseFinish:
		p, _ := e.ResponseFinish()
		return a.finish(e, p)
	case turnlog.TypeTurnEnd:
		return a.Flush()
	}
	return Output{}
}

// Flush freezes the responses still streaming — at a turn's end, or at the
// end of the input — as partial text.
func (a *Assembler) Flush() Output {
	var out Output
	for _, r := range a.responses {
		switch {
		case !r.finished && r.oversize:
			note, text := r.tooLargeNote()
			out.Partials = append(out.Partials, Partial{Seq: r.lastSeq, Turn: r.turn, Response: r.number, Content: text})
			out.Diagnostics = append(out.Diagnostics, Diagnostic{Code: CodeMessageTooLarge, Seq: r.lastSeq, Message: note})
		case !r.finished:
			out.Partials = append(out.Partials, r.partial(""))
			a.release(r)
		}
	}
	a.responses = nil
	clear(a.byNumber)
	return out
}

// responseKey identifies a response: its turn and its number in the turn.
type responseKey struct {
	turn   int64
	number int
}

func (a *Assembler) find(turn int64, number int) *response {
	return a.byNumber[responseKey{turn, number}]
}

// start begins a response; chunks without a response/start begin one too.
func (a *Assembler) start(e *turnlog.Event, number int) *response {
	r := &response{turn: e.Turn, number: number, adapter: a.session, lastSeq: e.Seq}
	a.responses = append(a.responses, r)
	if a.byNumber == nil {
		a.byNumber = map[responseKey]*response{}
	}
	a.byNumber[responseKey{e.Turn, number}] = r
	return r
}

func (a *Assembler) chunk(e *turnlog.Event, c turnlog.Chunk) Output {
	r := a.find(e.Turn, c.Response)
	if r == nil {
		r = a.start(e, c.Response)
	}
	if r.finished {
		return diagnostic(CodeInconsistentStream, e.Seq, "chunk for response %d after its response/finish is ignored", c.Response)
	}
	r.lastSeq = e.Seq
	n := int64(len(c.Delta.Text) + len(c.Delta.Thinking) + len(c.Delta.ArgumentsDelta))
	if r.oversize {
		r.bytes += n
		return Output{}
	}
	b := a.block(r, c.Block, c.Delta.Type)
	if b.typ != c.Delta.Type {
		return diagnostic(CodeInconsistentStream, e.Seq, "block %d of response %d is %s, a %s delta for it is ignored", c.Block, c.Response, b.typ, c.Delta.Type)
	}
	if r.bytes += n; r.bytes > MaxMessageBytes {
		r.oversize = true
		a.release(r)
		return Output{}
	}
	b.add(c.Delta)
	return Output{}
}

func (a *Assembler) finish(e *turnlog.Event, f turnlog.ResponseFinish) Output {
	r := a.find(e.Turn, f.Response)
	if r == nil {
		r = a.start(e, f.Response) // a response that streamed nothing
	}
	if r.finished {
		return diagnostic(CodeInconsistentStream, e.Seq, "response %d of turn %d finished twice; the second finish is ignored", f.Response, e.Turn)
	}
	r.finished = true
	r.lastSeq = e.Seq
	defer a.release(r) // a finished response takes no more chunks
	if r.oversize {
		return r.tooLarge(e, f)
	}
	if f.StopReason.Interrupted() {
		return Output{Partials: []Partial{r.partial(f.StopReason)}}
	}
	return r.assemble(e, f)
}

// tooLargeNote says what was left out of an oversize response, as a
// diagnostic's message and as content.
func (r *response) tooLargeNote() (string, []turnlog.ContentBlock) {
	note := fmt.Sprintf("response %d of turn %d streamed %d bytes, more than the %d a message may have; its content is not in the transcript", r.number, r.turn, r.bytes, MaxMessageBytes)
	return note, []turnlog.ContentBlock{{Type: turnlog.BlockText, Text: "[" + note + "]"}}
}

// tooLarge is what a response that streamed more than MaxMessageBytes
// becomes: its message (or partial) holds one text block that says what
// was left out, without replay state, and a diagnostic reports it. Its tool
// calls are gone, so results answering them replay as orphans do.
func (r *response) tooLarge(e *turnlog.Event, f turnlog.ResponseFinish) Output {
	note, text := r.tooLargeNote()
	out := Output{Diagnostics: []Diagnostic{{Code: CodeMessageTooLarge, Seq: e.Seq, Message: note}}}
	if f.StopReason.Interrupted() {
		out.Partials = []Partial{{Seq: r.lastSeq, Turn: r.turn, Response: r.number, StopReason: f.StopReason, Content: text}}
		return out
	}
	msg := turnlog.AssistantMessage{Content: text, API: r.adapter.API, Provider: r.adapter.Provider, Model: r.adapter.Model,
		Usage: f.Usage, StopReason: f.StopReason}
	if t, err := time.Parse(time.RFC3339Nano, e.Time); err == nil {
		msg.Timestamp = t.UnixMilli()
	}
	out.Message = &Assembled{Seq: e.Seq, Turn: r.turn, Response: r.number, Message: msg}
	return out
}

// release returns the text buffers of a response that is done streaming.
func (a *Assembler) release(r *response) {
	for _, b := range r.blocks {
		if b.text != nil {
			a.spare = append(a.spare, b.text[:0])
			b.text = nil
		}
	}
}

func diagnostic(code string, seq int64, format string, args ...any) Output {
	return Output{Diagnostics: []Diagnostic{{Code: code, Seq: seq, Message: fmt.Sprintf(format, args...)}}}
}

// response is one model call being streamed.
type response struct {
	turn    int64
	number  int
	adapter turnlog.Adapter
	blocks  []*streamBlock // in order of first chunk
	// byIndex finds a block by its index: a response may stream any number
	// of blocks, and a scan per chunk would make assembly quadratic.
	byIndex  map[int]*streamBlock
	finished bool
	lastSeq  int64
	// bytes is what the response's chunks streamed; oversize is set once
	// that passed MaxMessageBytes, and its blocks are no longer kept.
	bytes    int64
	oversize bool
}

// streamBlock is one block as the stream emitted it.
type streamBlock struct {
	index    int
	typ      string
	text     []byte // text, thinking, or the concatenated argumentsDelta
	redacted bool
	id, name string
}

// block returns the response's block index, starting it if it is new.
func (a *Assembler) block(r *response, index int, typ string) *streamBlock {
	if n := len(r.blocks); n > 0 && r.blocks[n-1].index == index {
		return r.blocks[n-1] // chunks nearly always extend the last block
	}
	if b := r.byIndex[index]; b != nil {
		return b
	}
	b := &streamBlock{index: index, typ: typ}
	if n := len(a.spare); n > 0 {
		b.text, a.spare = a.spare[n-1], a.spare[:n-1]
	}
	r.blocks = append(r.blocks, b)
	if r.byIndex == nil {
		r.byIndex = map[int]*streamBlock{}
	}
	r.byIndex[index] = b
	return b
}

func (b *streamBlock) add(d turnlog.Delta) {
	switch b.typ {
	case turnlog.BlockText:
		b.text = append(b.text, d.Text...)
	case turnlog.BlockThinking:
		b.text = append(b.text, d.Thinking...)
		b.redacted = b.redacted || d.Redacted
	case turnlog.BlockToolCall:
		b.text = append(b.text, d.ArgumentsDelta...)
		if b.id == "" {
			b.id = d.ID
		}
		if b.name == "" {
			b.name = d.Name
		}
	}
}

// keep is the single keep/drop decision of assembly, made once per emitted
// block; its answer prunes the content block and the envelope entry alike.
// Any future transformation of assembled content belongs here.
func keep(b *streamBlock, stop turnlog.StopReason) bool {
	switch b.typ {
	case turnlog.BlockText, turnlog.BlockThinking:
		return true
	case turnlog.BlockToolCall:
		// A call cut off at max tokens has truncated arguments: unsafe to run.
		return stop != turnlog.StopReasonLength
	}
	return false // no content block can be built for a type this version does not know
}

func (r *response) assemble(e *turnlog.Event, f turnlog.ResponseFinish) Output {
	var out Output
	blocks := r.sortedBlocks()
	kept := make([]bool, len(blocks))
	content := make([]turnlog.ContentBlock, 0, len(blocks))
	for i, b := range blocks {
		kept[i] = keep(b, f.StopReason)
		if !kept[i] {
			if b.typ != turnlog.BlockToolCall {
				out.Diagnostics = append(out.Diagnostics, Diagnostic{Code: CodeUnknownBlockType, Seq: e.Seq,
					Message: fmt.Sprintf("block %d of response %d has type %q, which this version cannot assemble; dropped", b.index, r.number, b.typ)})
			}
			continue
		}
		cb, diag := b.contentBlock(e.Seq)
		content = append(content, cb)
		if diag != nil {
			out.Diagnostics = append(out.Diagnostics, *diag)
		}
	}
	state, diag := alignEnvelope(f.ReplayState, blocks, kept)
	if diag != "" {
		out.Diagnostics = append(out.Diagnostics, Diagnostic{Code: CodeEnvelopeMisaligned, Seq: e.Seq,
			Message: fmt.Sprintf("response %d of turn %d: %s; replay state discarded", r.number, r.turn, diag)})
	}
	msg := turnlog.AssistantMessage{
		Content:     content,
		API:         r.adapter.API,
		Provider:    r.adapter.Provider,
		Model:       r.adapter.Model,
		Usage:       f.Usage,
		StopReason:  f.StopReason,
		ReplayState: state,
	}
	if t, err := time.Parse(time.RFC3339Nano, e.Time); err == nil {
		msg.Timestamp = t.UnixMilli()
	}
	out.Message = &Assembled{Seq: e.Seq, Turn: r.turn, Response: r.number, Message: msg}
	return out
}

func (b *streamBlock) contentBlock(seq int64) (turnlog.ContentBlock, *Diagnostic) {
	switch b.typ {
	case turnlog.BlockText:
		return turnlog.ContentBlock{Type: b.typ, Text: string(b.text)}, nil
	case turnlog.BlockThinking:
		return turnlog.ContentBlock{Type: b.typ, Thinking: string(b.text), Redacted: b.redacted}, nil
	}
	cb := turnlog.ContentBlock{Type: b.typ, ID: b.id, Name: b.name, Arguments: json.RawMessage("{}")}
	args := bytes.Clone(bytes.TrimSpace(b.text)) // the buffer is reused once the response is done
	if len(args) == 0 {
		return cb, nil // a call without arguments
	}
	if !json.Valid(args) || args[0] != '{' {
		return cb, &Diagnostic{Code: CodeInvalidToolArguments, Seq: seq,
			Message: fmt.Sprintf("tool call %q (%s, block %d): arguments are not a JSON object; kept with {}", b.id, b.name, b.index)}
	}
	cb.Arguments = args
	return cb, nil
}

// alignEnvelope applies the keep decisions to the envelope's entries. It
// returns the replay state to store and, when the envelope had to be
// discarded, why.
func alignEnvelope(raw json.RawMessage, blocks []*streamBlock, kept []bool) (json.RawMessage, string) {
	if raw == nil {
		return nil, ""
	}
	env, err := turnlog.ParseReplayEnvelope(raw)
	if !env.HasBlocks {
		return raw, "" // nothing indexed by block: replay decides whether the rest is usable
	}
	if perr, ok := errors.AsType[*turnlog.EnvelopeError](err); ok && strings.HasPrefix(perr.Field, "blocks") {
		return nil, fmt.Sprintf("unreadable block entries (%v)", perr)
	}
	for i, b := range blocks {
		if b.index != i {
			return nil, fmt.Sprintf("the stream skipped block %d, so entries cannot be matched to blocks", i)
		}
	}
	if len(env.Blocks) != len(blocks) {
		return nil, fmt.Sprintf("envelope has %d block entries, the stream emitted %d blocks", len(env.Blocks), len(blocks))
	}
	for i, entry := range env.Blocks {
		if !entry.IsNull() && entry.Type != blocks[i].typ {
			return nil, fmt.Sprintf("entry %d is for a %s block, block %d is %s", i, entry.Type, i, blocks[i].typ)
		}
	}
	if !slices.Contains(kept, false) {
		return raw, ""
	}
	pruned, err := env.KeepBlocks(kept)
	if err != nil {
		return nil, err.Error()
	}
	return pruned, ""
}

// sortedBlocks returns the blocks in index order. Streams nearly always emit
// blocks in that order, and then no sorted copy is made.
func (r *response) sortedBlocks() []*streamBlock {
	byIndex := func(x, y *streamBlock) int { return cmp.Compare(x.index, y.index) }
	if slices.IsSortedFunc(r.blocks, byIndex) {
		return r.blocks
	}
	return slices.SortedFunc(slices.Values(r.blocks), byIndex)
}

func (r *response) partial(stop turnlog.StopReason) Partial {
	p := Partial{Seq: r.lastSeq, Turn: r.turn, Response: r.number, StopReason: stop, Content: []turnlog.ContentBlock{}}
	for _, b := range r.sortedBlocks() {
		if b.typ == turnlog.BlockText || b.typ == turnlog.BlockThinking {
			cb, _ := b.contentBlock(r.lastSeq)
			p.Content = append(p.Content, cb)
		}
	}
	return p
}
