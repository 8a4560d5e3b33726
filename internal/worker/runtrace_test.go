package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/telemetry"
)

var tracedRun = Invocation{Task: derived.TaskAssemble, StoreURL: "mem://",
	Location: sessionlog.Location{Namespace: "team", Session: "chat", UID: "uid-1"}}

// runThroughCommandLine does what a worker pod does with a run it is
// handed: parse its command line and execute it, on log, in a context
// holding no span of the submitter's: only the command line joins them.
func runThroughCommandLine(t *testing.T, inv Invocation, log derived.Log) {
	t.Helper()
	args := inv.Args()
	var stderr bytes.Buffer
	parsed, err := ParseArgs(args[1:], &stderr)
	if err != nil {
		t.Fatalf("%q does not parse: %v: %s", args, err, stderr.String())
	}
	held := func(context.Context, string, sessionlog.Location) (derived.Log, func() error, error) {
		return log, func() error { return nil }, nil
	}
	if _, err := Execute(context.Background(), parsed, held); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
}

// runSpan is the one exported span of the worker run, and the turns'.
func runSpan(t *testing.T, exp *tracetest.InMemoryExporter, tel *telemetry.Telemetry) (tracetest.SpanStub, []tracetest.SpanStub) {
	t.Helper()
	if err := tel.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var runs, turns []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch {
		case s.Name == "worker assemble":
			runs = append(runs, s)
		case s.InstrumentationScope.Name == telemetry.Scope+"/sessions":
			turns = append(turns, s)
		}
	}
	if len(runs) != 1 {
		t.Fatalf("%d worker assemble spans exported, want 1", len(runs))
	}
	return runs[0], turns
}

// TestRunSpanIsTheSubmittersChild: a run handed over a command line, as
// a worker pod is, starts its span as a child of the manager's span that
// submitted it, in that span's trace; the turns keep their own traces.
func TestRunSpanIsTheSubmittersChild(t *testing.T) {
	exp, tel := exportTo(t)
	stepCtx, step := otel.Tracer("manager").Start(context.Background(), "reconcileWork")
	inv := tracedRun.WithTrace(stepCtx)
	step.End()
	if inv.Trace.Parent == "" {
		t.Fatal("an invocation made inside a recording span carries no traceparent")
	}
	runThroughCommandLine(t, inv, newMemLog(t, testLog(t, "tool-result-next-turn.jsonl")))
	run, turns := runSpan(t, exp, tel)
	want := step.SpanContext()
	if run.Parent.TraceID() != want.TraceID() || run.Parent.SpanID() != want.SpanID() {
		t.Errorf("the run's span has parent %s/%s, want the submitting step's %s/%s",
			run.Parent.TraceID(), run.Parent.SpanID(), want.TraceID(), want.SpanID())
	}
	if run.SpanContext.TraceID() != want.TraceID() {
		t.Errorf("the run's span is in trace %s, want the step's %s", run.SpanContext.TraceID(), want.TraceID())
	}
	if len(turns) == 0 {
		t.Fatal("the run exported no turn spans")
	}
	for _, s := range turns {
		if s.SpanContext.TraceID() == want.TraceID() || s.Parent.SpanID() == run.SpanContext.SpanID() {
			t.Errorf("turn span %s is in the submitter's trace or under the run: its trace belongs to the Session's turn", s.Name)
		}
	}
}

// TestRunSpanParentFromTheCommandLine: the trace context a command line
// carries, tracestate too, is the run span's parent; with none, or one
// that does not parse, the run still runs and its span is a root.
func TestRunSpanParentFromTheCommandLine(t *testing.T) {
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	state, _ := trace.ParseTraceState("vendor=opaque")
	submitter := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID,
		TraceFlags: trace.FlagsSampled, TraceState: state, Remote: true})
	carried := tracedRun.WithTrace(trace.ContextWithSpanContext(context.Background(), submitter))
	if carried.Trace.State != "vendor=opaque" {
		t.Fatalf("tracestate %q, want vendor=opaque carried", carried.Trace.State)
	}
	malformed := tracedRun
	malformed.Trace = TraceContext{Parent: "00-not-a-trace-01", State: "=="}

	cases := []struct {
		name string
		inv  Invocation
		// parent is the run span's parent; invalid: a root.
		parent trace.SpanContext
	}{
		{"carried with its tracestate", carried, submitter},
		{"none: an old manager, or traces off", tracedRun, trace.SpanContext{}},
		{"malformed", malformed, trace.SpanContext{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			exp, tel := exportTo(t)
			runThroughCommandLine(t, c.inv, newMemLog(t, testLog(t, "tool-result-next-turn.jsonl")))
			run, _ := runSpan(t, exp, tel)
			if !c.parent.IsValid() {
				if run.Parent.IsValid() {
					t.Errorf("the run's span has parent %s/%s, want a root", run.Parent.TraceID(), run.Parent.SpanID())
				}
				return
			}
			if !run.Parent.Equal(c.parent) {
				t.Errorf("the run's span has parent %+v, want %+v", run.Parent, c.parent)
			}
			if got := run.SpanContext.TraceState().String(); got != "vendor=opaque" {
				t.Errorf("the run's span has tracestate %q, want the submitter's vendor=opaque", got)
			}
		})
	}
}

// TestDigestLeavesOutTheTrace: a run submitted again from another
// reconcile, under another trace context, is the same run; any other
// change to its command line makes another.
func TestDigestLeavesOutTheTrace(t *testing.T) {
	traced := tracedRun
	traced.Trace = TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "vendor=opaque"}
	if slices.Equal(traced.Args(), tracedRun.Args()) {
		t.Fatalf("the command line %q does not carry the trace context", traced.Args())
	}
	if traced.Digest() != tracedRun.Digest() {
		t.Error("the trace context changes the run's digest")
	}
	moved := tracedRun
	moved.StoreURL = "mem://other"
	if moved.Digest() == tracedRun.Digest() {
		t.Error("a run on another store has the same digest")
	}
	// Runs named before the command line carried a trace context keep
	// their names: the digest is of the command line without its flags.
	var without []string
	for _, arg := range tracedRun.Args() {
		if !strings.HasPrefix(arg, "--traceparent=") && !strings.HasPrefix(arg, "--tracestate=") {
			without = append(without, arg)
		}
	}
	sum := sha256.Sum256([]byte(strings.Join(without, "\x00")))
	if got := hex.EncodeToString(sum[:]); tracedRun.Digest() != got {
		t.Errorf("digest %s, want %s: that of the command line without the trace context's flags", tracedRun.Digest(), got)
	}
}
