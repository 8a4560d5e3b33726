package turnspans

import (
	"encoding/json"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// turnlog's own attributes, beside the conventions'.
const (
	// AttrSession and AttrNamespace name the Session.
	AttrSession   = attribute.Key("turnlog.session")
	AttrNamespace = attribute.Key("k8s.namespace.name")
	// AttrTurn is the turn's number; AttrStartSeq and AttrEndSeq the seqs
	// of its turn/start and turn/end; AttrSeq the seq of the event a chat
	// or tool span starts at.
	AttrTurn     = attribute.Key("turnlog.turn")
	AttrStartSeq = attribute.Key("turnlog.turn.start_seq")
	AttrEndSeq   = attribute.Key("turnlog.turn.end_seq")
	AttrSeq      = attribute.Key("turnlog.seq")
	// AttrResponse is a chat span's response number within the turn.
	AttrResponse = attribute.Key("turnlog.response")
	// AttrStopReason is the turn's turn/end reason, pi-ai's words.
	AttrStopReason = attribute.Key("turnlog.turn.reason")
	// AttrForkSource is, on a fork's child's turns, the UID of the
	// Session whose turn the fork was cut at: its source's, or further up.
	AttrForkSource = attribute.Key("turnlog.fork.source_uid")
	// AttrLinkRelation says what a link points at: previous_turn, or
	// fork_source for a fork's first turn.
	AttrLinkRelation = attribute.Key("turnlog.link.relation")
)

// maxContentBytes bounds a captured content attribute: a tool's output of
// megabytes is cut, and says so.
const maxContentBytes = 32 << 10

// spans are the turn's spans: invoke_agent, then a chat span per
// response, then an execute_tool span per tool call. A turn no event of
// which has a time has none.
func (t *turnState) spans(id Identity, opts Options, links []trace.Link) []Span {
	if t.first.IsZero() {
		return nil
	}
	root := TurnSpan(id.UID, t.endSeq)
	out := []Span{t.agentSpan(id, opts, root, links)}
	for _, r := range t.responses {
		out = append(out, t.chatSpan(id, opts, root, r))
		for _, n := range r.order {
			if b := r.blocks[n]; b.kind == turnlog.BlockToolCall {
				out = append(out, t.toolSpan(id, opts, root, toolCall{r: r, b: b, block: n}, t.answer(b.id)))
			}
		}
	}
	// Results that answer a call of an earlier turn start with this turn.
	for _, res := range t.results {
		if !res.used {
			out = append(out, t.toolSpan(id, opts, root, toolCall{}, res))
		}
	}
	return out
}

// toolCall is a tool call block of a response; the zero value stands for
// a call made in an earlier turn.
type toolCall struct {
	r     *response
	b     *block
	block int
}

// answer is the first unused result that answers the call id.
func (t *turnState) answer(callID string) *result {
	for _, res := range t.results {
		if !res.used && res.callID == callID {
			res.used = true
			return res
		}
	}
	return nil
}

func (t *turnState) agentSpan(id Identity, opts Options, root trace.SpanContext, links []trace.Link) Span {
	s := Span{
		Name: "invoke_agent " + id.Session, Kind: trace.SpanKindInternal, Context: root,
		Start: t.first, End: t.last, Links: links,
		Attributes: append(t.common(id),
			semconv.GenAIOperationNameInvokeAgent,
			semconv.GenAIAgentNameKey.String(id.Session),
			AttrStartSeq.Int64(t.startSeq), AttrEndSeq.Int64(t.endSeq),
			AttrStopReason.String(string(t.reason)),
		),
	}
	if len(t.responses) > 0 {
		a := t.responses[0].adapter
		s.Attributes = append(s.Attributes, providerName(a.Provider), semconv.GenAIRequestModelKey.String(a.Model))
	}
	in, out, cacheRead, cacheWrite := t.usage()
	s.Attributes = append(s.Attributes, tokenAttributes(in, out, cacheRead, cacheWrite)...)
	if id.Fork != nil {
		s.Attributes = append(s.Attributes, AttrForkSource.String(id.Fork.UID))
	}
	if opts.CaptureContent && len(t.input) > 0 {
		s.Attributes = append(s.Attributes, semconv.GenAIInputMessagesKey.String(clip(userMessages(t.input))))
	}
	if t.reason.Interrupted() {
		s.Status, s.Description = codes.Error, "turn ended "+string(t.reason)
		s.Attributes = append(s.Attributes, semconv.ErrorTypeKey.String(string(t.reason)))
	}
	return s
}

func (t *turnState) chatSpan(id Identity, opts Options, root trace.SpanContext, r *response) Span {
	end := r.finish
	if !r.finished {
		end = t.last
	}
	s := Span{
		Name: "chat " + r.adapter.Model, Kind: trace.SpanKindClient,
		Context: spanContext(id.UID, t.endSeq, "chat", r.seq), Parent: root,
		Start: orElse(r.start, t.first), End: end,
		Attributes: append(t.common(id),
			semconv.GenAIOperationNameChat,
			providerName(r.adapter.Provider),
			semconv.GenAIRequestModelKey.String(r.adapter.Model),
			semconv.GenAIResponseModelKey.String(r.adapter.Model),
			AttrResponse.Int(r.index), AttrSeq.Int64(r.seq),
		),
	}
	if s.End.Before(s.Start) {
		s.End = s.Start
	}
	stop := r.stopReason
	if !r.finished {
		stop = turnlog.StopReasonAborted
	}
	s.Attributes = append(s.Attributes, semconv.GenAIResponseFinishReasonsKey.StringSlice([]string{string(stop)}))
	s.Attributes = append(s.Attributes, tokenAttributes(readUsage(r.usage))...)
	if opts.CaptureContent {
		s.Attributes = append(s.Attributes, semconv.GenAIOutputMessagesKey.String(clip(outputMessage(r, stop))))
	}
	switch {
	case !r.finished:
		s.Status, s.Description = codes.Error, "the stream was cut: no response/finish before the turn ended"
	case stop.Interrupted():
		s.Status, s.Description = codes.Error, "response stopped "+string(stop)
	}
	if s.Status == codes.Error {
		s.Attributes = append(s.Attributes, semconv.ErrorTypeKey.String(string(stop)))
	}
	return s
}

// toolSpan runs from the calling response's finish (the turn's start for
// a call of an earlier turn) to the result, or to the turn's end when no
// result came.
func (t *turnState) toolSpan(id Identity, opts Options, root trace.SpanContext, c toolCall, res *result) Span {
	s := Span{Kind: trace.SpanKindInternal, Parent: root, Start: t.first, End: t.last}
	var callID, name string
	var seq int64
	if c.b != nil {
		callID, name = c.b.id, c.b.name
		seq = c.r.finishSeq
		if !c.r.finished {
			seq = c.r.seq
		}
		s.Start = orElse(c.r.finish, orElse(c.r.start, t.first))
		s.Context = spanContext(id.UID, t.endSeq, fmt.Sprintf("tool %d", c.block), c.r.seq)
	} else {
		callID, name, seq = res.callID, res.name, res.seq
		s.Context = spanContext(id.UID, t.endSeq, "result", res.seq)
	}
	if res != nil {
		s.End = res.at
		if name == "" {
			name = res.name
		}
	}
	s.Name = "execute_tool " + name
	s.Attributes = append(t.common(id),
		semconv.GenAIOperationNameExecuteTool,
		semconv.GenAIToolNameKey.String(name),
		semconv.GenAIToolCallIDKey.String(callID),
		semconv.GenAIToolTypeKey.String("function"),
		AttrSeq.Int64(seq),
	)
	if opts.CaptureContent {
		if c.b != nil && len(c.b.text) > 0 {
			s.Attributes = append(s.Attributes, semconv.GenAIToolCallArgumentsKey.String(clip(string(c.b.text))))
		}
		if res != nil {
			s.Attributes = append(s.Attributes, semconv.GenAIToolCallResultKey.String(clip(string(res.content))))
		}
	}
	switch {
	case res == nil:
		s.Status, s.Description = codes.Error, "no tool/result in the turn"
		s.Attributes = append(s.Attributes, semconv.ErrorTypeKey.String("no_result"))
	case res.isError:
		s.Status, s.Description = codes.Error, "the tool reported an error"
		s.Attributes = append(s.Attributes, semconv.ErrorTypeKey.String("tool_error"))
	}
	if s.End.Before(s.Start) {
		s.End = s.Start
	}
	return s
}

// common are the attributes of every span of the turn.
func (t *turnState) common(id Identity) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.GenAIConversationIDKey.String(id.UID),
		AttrNamespace.String(id.Namespace), AttrSession.String(id.Session),
		AttrTurn.Int64(t.number),
	}
}

// usage adds up the usage of the turn's finished responses.
func (t *turnState) usage() (in, out, cacheRead, cacheWrite int64) {
	for _, r := range t.responses {
		i, o, cr, cw := readUsage(r.usage)
		in, out, cacheRead, cacheWrite = in+i, out+o, cacheRead+cr, cacheWrite+cw
	}
	return in, out, cacheRead, cacheWrite
}

// readUsage reads pi-ai's usage: input excludes the cached tokens, which
// the conventions' input_tokens includes. Anything unreadable is 0.
func readUsage(raw json.RawMessage) (in, out, cacheRead, cacheWrite int64) {
	var u struct {
		Input      int64 `json:"input"`
		Output     int64 `json:"output"`
		CacheRead  int64 `json:"cacheRead"`
		CacheWrite int64 `json:"cacheWrite"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &u) != nil {
		return 0, 0, 0, 0
	}
	return u.Input + u.CacheRead + u.CacheWrite, u.Output, u.CacheRead, u.CacheWrite
}

func tokenAttributes(in, out, cacheRead, cacheWrite int64) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.GenAIUsageInputTokensKey.Int64(in),
		semconv.GenAIUsageOutputTokensKey.Int64(out),
		semconv.GenAIUsageCacheReadInputTokensKey.Int64(cacheRead),
		semconv.GenAIUsageCacheCreationInputTokensKey.Int64(cacheWrite),
	}
}

// providers maps pi-ai's provider names to the conventions' where they
// name one; others pass as they are.
var providers = map[string]string{
	"google": "gcp.gemini", "google-vertex": "gcp.vertex_ai", "amazon-bedrock": "aws.bedrock",
	"xai": "x_ai", "mistral": "mistral_ai", "azure-openai-responses": "azure.ai.openai",
}

func providerName(p string) attribute.KeyValue {
	if name, ok := providers[p]; ok {
		p = name
	}
	return semconv.GenAIProviderNameKey.String(p)
}

func orElse(t, otherwise time.Time) time.Time {
	if t.IsZero() {
		return otherwise
	}
	return t
}

// clip bounds a content attribute to maxContentBytes, on a rune boundary.
func clip(s string) string {
	if len(s) <= maxContentBytes {
		return s
	}
	cut := maxContentBytes
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + fmt.Sprintf("…[%d bytes cut]", len(s)-cut)
}
