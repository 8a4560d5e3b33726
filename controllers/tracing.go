package controllers

import (
	"context"
	"reflect"
	"runtime"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/turnlog/turnlog/internal/telemetry"
)

// A reconcile is a span, each of its steps a child span, and a run the
// work step starts a child of that step's, in this process (local mode)
// or on a worker pod, which is handed the step's trace context on the
// run's command line (workerRun): through the global tracer provider, the
// no-op one unless the manager exports traces (internal/telemetry).

// tracer is asked of the global provider at each span, so that a provider
// set after start (or replaced) is the one used.
func tracer() trace.Tracer { return otel.Tracer(telemetry.Scope + "/controllers") }

// startReconcile starts the span of one reconcile of kind's object req.
func startReconcile(ctx context.Context, kind string, req ctrl.Request) (context.Context, trace.Span) {
	return tracer().Start(ctx, "reconcile "+kind, trace.WithAttributes(
		attribute.String("k8s.namespace.name", req.Namespace),
		attribute.String("turnlog."+strings.ToLower(kind), req.Name),
	))
}

// traceStep runs one step of a reconcile in a span named after the
// step's method, which ends with the step's error.
func traceStep[S any](ctx context.Context, step func(context.Context, S) error, s S) error {
	ctx, span := tracer().Start(ctx, stepName(step))
	defer span.End()
	err := step(ctx, s)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// stepName is a method value's name: reconcileLog for
// (*SessionReconciler).reconcileLog-fm.
func stepName(step any) string {
	fn := runtime.FuncForPC(reflect.ValueOf(step).Pointer())
	if fn == nil {
		return "step"
	}
	name := strings.TrimSuffix(fn.Name(), "-fm")
	return name[strings.LastIndex(name, ".")+1:]
}
