package worker

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/telemetry"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/turnspans"
)

// AssembleOptions are what an assembly run is told besides its log.
type AssembleOptions struct {
	// Session is whose log it is, for the turn spans; zero (no UID):
	// the run exports none.
	Session turnspans.Identity
}

// turnTrace gives the turns an assembly run commits to the process's
// export, after the checkpoint that covers them is stored: a run that
// dies before its commit exports nothing and its redo does, once.
type turnTrace struct {
	tel *telemetry.Telemetry
	log derived.Log
	b   *turnspans.Builder
	// spans are those of the turns ended since the last commit; through
	// the last of their turn/ends.
	spans   []turnspans.Span
	through int64
	// exported is the stored mark: turns ending at or before it are not
	// exported again.
	exported int64
}

// turnTrace is the run's turn export, nil (doing nothing) when the
// process exports no traces or the run names no Session. prevEnd is the
// seq of the last turn/end the checkpoint covers, -1 for none.
func (o AssembleOptions) turnTrace(ctx context.Context, log derived.Log, prevEnd int64) *turnTrace {
	tel := telemetry.Current()
	if tel == nil || o.Session.UID == "" {
		return nil
	}
	return &turnTrace{tel: tel, log: log, exported: derived.LoadTracesMark(ctx, log), through: -1,
		b: turnspans.NewBuilder(o.Session, turnspans.Options{CaptureContent: tel.CaptureContent()}, prevEnd)}
}

// add folds the event into the turn being read.
func (t *turnTrace) add(e *turnlog.Event) {
	if t == nil {
		return
	}
	spans := t.b.Add(e)
	if e.Type == turnlog.TypeTurnEnd && e.Seq > t.exported {
		t.spans = append(t.spans, spans...)
		t.through = e.Seq
	}
}

// committed is called once the checkpoint covering the turns read so far
// is stored: it stores the mark, then hands their spans to the export. A
// mark that cannot be stored exports nothing (it is tried again with the
// next turn), so that no turn is ever exported twice; a failure here never
// fails the run.
func (t *turnTrace) committed(ctx context.Context) {
	if t == nil || t.through <= t.exported {
		return
	}
	if err := derived.StoreTracesMark(ctx, t.log, t.through); err != nil {
		trace.SpanFromContext(ctx).AddEvent("turn spans not exported: " + err.Error())
		t.spans = nil
		return
	}
	t.exported = t.through
	t.tel.ExportTurn(t.spans)
	t.spans = nil
}

// prevTurnEnd is the seq of the last turn/end a checkpoint covers.
func prevTurnEnd(sum derived.Summary) int64 {
	if sum.LastTurnEnd == nil {
		return -1
	}
	return sum.LastTurnEnd.Seq
}

// sessionOf is the Session an invocation's turn spans are of.
func sessionOf(inv Invocation) turnspans.Identity {
	id := turnspans.Identity{UID: inv.Location.UID, Namespace: inv.Location.Namespace, Session: inv.Location.Session}
	if inv.ForkSource != "" {
		id.Fork = &turnspans.ForkSource{UID: inv.ForkSource, CutSeq: inv.ForkCut}
	}
	return id
}

// WithTrace is inv carrying the trace context of ctx's span, so that the
// run's span, wherever the run is done, is that span's child; inv with no
// trace context when ctx has no span (traces off).
func (inv Invocation) WithTrace(ctx context.Context) Invocation {
	headers := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, headers)
	inv.Trace = TraceContext{Parent: headers.Get("traceparent"), State: headers.Get("tracestate")}
	return inv
}

// parentOf is ctx with the invocation's trace context as its remote
// parent span. Without one, or with one that does not parse (an old or
// odd manager), ctx is left as it is: the run's span is then a child of
// whatever span ctx holds, or a root.
func (inv Invocation) parentOf(ctx context.Context) context.Context {
	if inv.Trace.Parent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{
		"traceparent": inv.Trace.Parent, "tracestate": inv.Trace.State})
}

// startRun starts the span of a worker run, a child of the manager's span
// that asked for it (Invocation.Trace), on a worker pod as in the
// manager's own process; end ends it with the run's error. Without an export the
// span records nothing, and its attributes are not even made.
func startRun(ctx context.Context, inv Invocation) (context.Context, func(error)) {
	ctx, span := otel.Tracer(telemetry.Scope).Start(inv.parentOf(ctx), "worker "+string(inv.Task))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("turnlog.session", inv.Location.Session),
			attribute.String("k8s.namespace.name", inv.Location.Namespace),
			attribute.String("turnlog.session.uid", inv.Location.UID),
			attribute.String("turnlog.worker.task", string(inv.Task)),
			// The run: what its command line digests to, as its name does.
			attribute.String("turnlog.worker.invocation", inv.Digest()[:16]),
		)
	}
	return ctx, func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, oneLine(err))
		}
		span.End()
	}
}

// oneLine is err's message on one line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }
