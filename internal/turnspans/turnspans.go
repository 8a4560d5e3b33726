// Package turnspans turns a session's log into OpenTelemetry spans by the
// GenAI semantic conventions: one trace per settled turn, holding an
// invoke_agent span for the turn, a chat span per model response and an
// execute_tool span per tool call, timed by the events' times.
//
// It is a pure function of the events and of the Session's identity: the
// trace and span ids are hashes of the Session's UID and of seqs, so the
// same turn always gives the same spans, whoever builds them and however
// often. A fork's child names its source's identity for the turns it
// copied, and builds none of them: they are its source's spans already.
// The package knows nothing of exporting; internal/telemetry does that.
package turnspans

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Identity is the Session whose turns the spans are of.
type Identity struct {
	// UID is the Session's UID: the conversation's id, and what every id
	// is derived from.
	UID string
	// Namespace and Session name the Session, as attributes.
	Namespace, Session string
	// Fork is set on a fork's child: whose turns its log starts with.
	Fork *ForkSource
}

// ForkSource is the Session a fork's child was cut from.
type ForkSource struct {
	// UID is the source Session's UID.
	UID string
	// CutSeq is the seq of the turn/end the child's log was cut at: the
	// turns through it are the source's, and have the source's ids.
	CutSeq int64
}

// Options are what the operator chose to put in spans.
type Options struct {
	// CaptureContent puts the messages, tool arguments and tool results
	// in the spans; off, spans hold no content, as the conventions ask.
	CaptureContent bool
}

// Span is one finished span, with what an OTLP exporter sends of it.
type Span struct {
	Name        string
	Kind        trace.SpanKind
	Context     trace.SpanContext
	Parent      trace.SpanContext
	Start, End  time.Time
	Attributes  []attribute.KeyValue
	Links       []trace.Link
	Status      codes.Code
	Description string
}

// TraceID is the trace of the turn that ends at endSeq in the log of the
// Session uid.
func TraceID(uid string, endSeq int64) trace.TraceID {
	var id trace.TraceID
	sum := hash("trace", uid, endSeq, "", 0)
	copy(id[:], sum[:16])
	return id
}

// TurnSpan is the invoke_agent span of that turn: what the next turn, and
// a fork's first turn, link to.
func TurnSpan(uid string, endSeq int64) trace.SpanContext {
	return spanContext(uid, endSeq, "turn", endSeq)
}

// spanContext is the span of kind at seq inside the turn that ends at
// endSeq.
func spanContext(uid string, endSeq int64, kind string, seq int64) trace.SpanContext {
	var id trace.SpanID
	sum := hash("span", uid, endSeq, kind, seq)
	copy(id[:], sum[:8])
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: TraceID(uid, endSeq), SpanID: id, TraceFlags: trace.FlagsSampled,
	})
}

// hash is the digest ids are cut from; every part is length-prefixed, so
// no two different inputs share their bytes.
func hash(what, uid string, endSeq int64, kind string, seq int64) [sha256.Size]byte {
	b := make([]byte, 0, 64+len(uid))
	for _, s := range []string{"turnlog/" + what, uid, kind} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = strconv.AppendInt(append(b, ' '), endSeq, 10)
	b = strconv.AppendInt(append(b, ' '), seq, 10)
	sum := sha256.Sum256(b)
	// An all-zero id is invalid; the chance is 2^-64, the fix one byte.
	sum[7] |= 1
	sum[15] |= 1
	return sum
}

// Builder folds a log's events into the spans of each turn as it ends.
type Builder struct {
	id   Identity
	opts Options
	// prevEnd is the seq of the last turn/end before the turn being read,
	// -1 for none: the turn a new turn links to.
	prevEnd int64
	turn    *turnState
}

// NewBuilder starts at a turn boundary: prevEnd is the seq of the last
// turn/end before the events it will be given (-1 for none), as a run's
// checkpoint records it.
func NewBuilder(id Identity, opts Options, prevEnd int64) *Builder {
	return &Builder{id: id, opts: opts, prevEnd: prevEnd}
}

// Add takes the log's next event. When the event ends a turn, it returns
// the turn's spans, the invoke_agent span first; for a turn no event of
// which has a time, and for a fork's turns through its cut, none.
func (b *Builder) Add(e *turnlog.Event) []Span {
	switch e.Type {
	case turnlog.TypeTurnStart:
		b.turn = newTurnState(e, b.opts)
		return nil
	case turnlog.TypeTurnEnd:
		t := b.turn
		b.turn = nil
		prev := b.prevEnd
		b.prevEnd = e.Seq
		if t == nil || b.copied(e.Seq) {
			return nil
		}
		t.end(e)
		return t.spans(b.id, b.opts, b.link(prev))
	}
	if b.turn != nil {
		b.turn.add(e)
	}
	return nil
}

// copied reports whether the turn ending at seq came with a fork's cut.
func (b *Builder) copied(seq int64) bool {
	return b.id.Fork != nil && seq <= b.id.Fork.CutSeq
}

// link is the previous turn's invoke_agent span, the source's when it is
// the cut turn of a fork; none for the first turn.
func (b *Builder) link(prevEnd int64) []trace.Link {
	if prevEnd < 0 {
		return nil
	}
	uid, rel := b.id.UID, "previous_turn"
	if b.copied(prevEnd) {
		uid, rel = b.id.Fork.UID, "fork_source"
	}
	return []trace.Link{{
		SpanContext: TurnSpan(uid, prevEnd),
		Attributes:  []attribute.KeyValue{AttrLinkRelation.String(rel)},
	}}
}
