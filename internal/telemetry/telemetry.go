// Package telemetry is a turnlog process's OpenTelemetry trace export:
// the OTLP flags the manager and the workers share, the tracer provider
// turnlog's own spans go through (reconciles, worker runs; set as the
// global one, so instrumented code calls otel.Tracer), and the export of
// the sessions' turn spans that internal/turnspans builds.
//
// Nothing is started unless an endpoint is configured, by --otlp-endpoint
// or the standard OTEL_EXPORTER_OTLP_* variables: then Current is nil, the
// global provider is OpenTelemetry's no-op one, and tracing costs nothing.
package telemetry

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/turnlog/turnlog/internal/turnspans"
)

// The OTLP protocols a process exports with.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// SessionsService is the service.name of the sessions' turn spans,
// whichever process exported them: a conversation is found under one
// service, and a turn exported again by another process is the same span
// to the backend, byte for byte.
const SessionsService = "turnlog-sessions"

// Scope is the instrumentation scope of turnlog's spans.
const Scope = "github.com/turnlog/turnlog"

// Flags are the trace export flags of `turnlog manager` and `turnlog
// worker serve`; the manager hands its own to its worker pods (Args).
type Flags struct {
	// Endpoint is the collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT:
	// http://HOST:4317 for grpc, http://HOST:4318 for http/protobuf
	// (whose /v1/traces is added); https:// for TLS. Empty: the
	// OTEL_EXPORTER_OTLP_* variables, and without them no export.
	Endpoint string
	// Protocol is grpc or http/protobuf; empty: OTEL_EXPORTER_OTLP_PROTOCOL,
	// else http/protobuf, the specification's default.
	Protocol string
	// CaptureContent puts messages, tool arguments and results in the turn
	// spans.
	CaptureContent bool
}

// Bind binds the flags to fs.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.StringVar(&f.Endpoint, "otlp-endpoint", "", "export traces by OTLP to this collector (http://HOST:4317 for grpc, http://HOST:4318 for http/protobuf); empty: the OTEL_EXPORTER_OTLP_* variables, and without them no export")
	fs.StringVar(&f.Protocol, "otlp-protocol", "", `OTLP protocol: "grpc" or "http/protobuf"; empty: OTEL_EXPORTER_OTLP_PROTOCOL, else "http/protobuf"`)
	fs.BoolVar(&f.CaptureContent, "otlp-capture-content", false, "put message contents, tool arguments and tool results in the sessions' spans (off: none)")
}

// Args are the flags as a command line, those set only: what a worker pod
// is started with.
func (f Flags) Args() []string {
	var args []string
	if f.Endpoint != "" {
		args = append(args, "--otlp-endpoint="+f.Endpoint)
	}
	if f.Protocol != "" {
		args = append(args, "--otlp-protocol="+f.Protocol)
	}
	if f.CaptureContent {
		args = append(args, "--otlp-capture-content")
	}
	return args
}

// Check returns a one-line error naming the flag that is wrong.
func (f Flags) Check() error {
	if f.Protocol != "" && f.Protocol != ProtocolGRPC && f.Protocol != ProtocolHTTP {
		return fmt.Errorf("--otlp-protocol %q: want %q or %q", f.Protocol, ProtocolGRPC, ProtocolHTTP)
	}
	if f.Endpoint == "" {
		return nil
	}
	u, err := url.Parse(f.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--otlp-endpoint %q: want a URL http://HOST:PORT or https://HOST:PORT", f.Endpoint)
	}
	return nil
}

// Enabled reports whether an export is configured: by the flag, or by the
// standard variables (and not turned off by OTEL_SDK_DISABLED or
// OTEL_TRACES_EXPORTER=none).
func (f Flags) Enabled() bool {
	if os.Getenv("OTEL_SDK_DISABLED") == "true" || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return f.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// protocol is the protocol in force.
func (f Flags) protocol() string {
	for _, p := range []string{f.Protocol, os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")} {
		if p != "" {
			return p
		}
	}
	return ProtocolHTTP
}

// Telemetry is a process's running export.
type Telemetry struct {
	provider *sdktrace.TracerProvider
	// turns receives the turn spans: the provider's own batch processor,
	// so turnlog's spans and the sessions' share one exporter and queue.
	turns    sdktrace.SpanProcessor
	sessions *resource.Resource
	capture  bool
}

var current atomic.Pointer[Telemetry]

// Current is the process's running export, nil when there is none.
func Current() *Telemetry { return current.Load() }

// Start starts the export the flags configure, as the process's own
// (Current, and the global tracer provider), under service (unless
// OTEL_SERVICE_NAME names another). Without an endpoint it starts
// nothing and returns nil.
func Start(ctx context.Context, f Flags, service string) (*Telemetry, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	if !f.Enabled() {
		return nil, nil
	}
	exp, err := newExporter(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("start the OTLP exporter: %w", err)
	}
	return StartWith(exp, service, f.CaptureContent), nil
}

// StartWith starts an export to exp as the process's own: what Start does
// once it has an exporter; tests and benchmarks hand it an in-memory one.
func StartWith(exp sdktrace.SpanExporter, service string, capture bool) *Telemetry {
	if name := os.Getenv("OTEL_SERVICE_NAME"); name != "" {
		service = name
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceNameKey.String(service)))
	if err != nil {
		res = resource.NewSchemaless(semconv.ServiceNameKey.String(service))
	}
	batch := sdktrace.NewBatchSpanProcessor(exp)
	t := &Telemetry{
		provider: sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(batch)),
		turns:    batch,
		sessions: resource.NewSchemaless(semconv.ServiceNameKey.String(SessionsService)),
		capture:  capture,
	}
	otel.SetTracerProvider(t.provider)
	current.Store(t)
	return t
}

// newExporter is the OTLP exporter of the protocol in force; the
// variables the flag leaves unset (headers, TLS, timeouts) are read by
// the exporter itself.
func newExporter(ctx context.Context, f Flags) (sdktrace.SpanExporter, error) {
	switch p := f.protocol(); p {
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if f.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(f.Endpoint))
		}
		return otlptracegrpc.New(ctx, opts...)
	case ProtocolHTTP:
		var opts []otlptracehttp.Option
		if f.Endpoint != "" {
			u, _ := url.Parse(f.Endpoint) // Check parsed it
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		}
		return otlptracehttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("OTLP protocol %q: want %q or %q", p, ProtocolGRPC, ProtocolHTTP)
	}
}

// CaptureContent reports whether turn spans carry contents.
func (t *Telemetry) CaptureContent() bool { return t.capture }

// ExportTurn queues a turn's spans for export, under SessionsService.
func (t *Telemetry) ExportTurn(spans []turnspans.Span) {
	for _, s := range spans {
		t.turns.OnEnd(t.readOnly(s))
	}
}

func (t *Telemetry) readOnly(s turnspans.Span) sdktrace.ReadOnlySpan {
	return tracetest.SpanStub{
		Name: s.Name, SpanKind: s.Kind, SpanContext: s.Context, Parent: s.Parent,
		StartTime: s.Start, EndTime: s.End,
		Attributes: s.Attributes, Links: linksOf(s),
		Status:               sdktrace.Status{Code: s.Status, Description: s.Description},
		Resource:             t.sessions,
		InstrumentationScope: instrumentation.Scope{Name: Scope + "/sessions"},
	}.Snapshot()
}

func linksOf(s turnspans.Span) []sdktrace.Link {
	links := make([]sdktrace.Link, len(s.Links))
	for i, l := range s.Links {
		links[i] = sdktrace.Link{SpanContext: l.SpanContext, Attributes: l.Attributes}
	}
	return links
}

// ForceFlush exports what is queued.
func (t *Telemetry) ForceFlush(ctx context.Context) error { return t.provider.ForceFlush(ctx) }

// Shutdown exports what is queued, within a few seconds, and stops the
// export; the global provider is the no-op one again.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	current.CompareAndSwap(t, nil)
	otel.SetTracerProvider(noop.NewTracerProvider())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("stop the OTLP export: %w", err)
	}
	return nil
}
