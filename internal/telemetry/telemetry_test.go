package telemetry_test

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/turnlog/turnlog/internal/telemetry"
	"github.com/turnlog/turnlog/internal/testutil/jaeger"
	"github.com/turnlog/turnlog/internal/turnspans"
)

func TestNothingStartsWithoutAnEndpoint(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(v, "")
	}
	tel, err := telemetry.Start(context.Background(), telemetry.Flags{CaptureContent: true}, "turnlog-manager")
	if err != nil || tel != nil || telemetry.Current() != nil {
		t.Fatalf("Start without an endpoint: %v, %v; want nothing started", tel, err)
	}
	if _, span := otel.Tracer("t").Start(context.Background(), "x"); span.SpanContext().IsValid() {
		t.Error("the global tracer provider records spans with no export")
	}
}

func TestFlagsAreCheckedAndPassedOn(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--otlp-protocol=thrift"}, `--otlp-protocol "thrift": want "grpc" or "http/protobuf"`},
		{[]string{"--otlp-endpoint=collector:4317"}, `--otlp-endpoint "collector:4317": want a URL`},
		{[]string{"--otlp-endpoint=http://collector:4317", "--otlp-protocol=grpc", "--otlp-capture-content"}, ""},
	} {
		var f telemetry.Flags
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.Bind(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := f.Check()
		if c.err == "" {
			if err != nil {
				t.Errorf("%v: %v", c.args, err)
			}
			if got := strings.Join(f.Args(), " "); got != strings.Join(c.args, " ") {
				t.Errorf("Args %q, want %q", got, c.args)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), c.err) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.err)
		}
	}
}

// Both protocols reach a real Jaeger: a turn's spans under the sessions'
// service, turnlog's own under the process's.
func TestExportToJaeger(t *testing.T) {
	j := jaeger.Start(t)
	for _, c := range []struct{ protocol, endpoint, session string }{
		{telemetry.ProtocolGRPC, j.OTLPGRPC, "over-grpc"},
		{telemetry.ProtocolHTTP, j.OTLPHTTP, "over-http"},
	} {
		ctx := context.Background()
		tel, err := telemetry.Start(ctx, telemetry.Flags{Endpoint: c.endpoint, Protocol: c.protocol}, "turnlog-test-"+c.session)
		if err != nil {
			t.Fatal(err)
		}
		_, own := otel.Tracer("t").Start(ctx, "reconcile Session")
		own.End()
		now := time.Now()
		id := turnspans.Identity{UID: "uid-" + c.session, Namespace: "team", Session: c.session}
		tel.ExportTurn([]turnspans.Span{{Name: "invoke_agent " + c.session, Context: turnspans.TurnSpan(id.UID, 7), Start: now, End: now.Add(time.Second)}})
		if err := tel.Shutdown(ctx); err != nil {
			t.Fatalf("%s: %v", c.protocol, err)
		}
		if telemetry.Current() != nil {
			t.Errorf("%s: Current after Shutdown", c.protocol)
		}
	}
	wantSpans(t, j, telemetry.SessionsService, []string{"invoke_agent over-grpc", "invoke_agent over-http"})
	wantSpans(t, j, "turnlog-test-over-grpc", []string{"reconcile Session"})
	wantSpans(t, j, "turnlog-test-over-http", []string{"reconcile Session"})
}

func wantSpans(t *testing.T, j *jaeger.Jaeger, service string, want []string) {
	t.Helper()
	var names []string
	for range 100 {
		spans, err := j.RawSpans(service)
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for _, s := range spans {
			names = append(names, s.Name)
		}
		if len(names) >= len(want) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, w := range want {
		if !strings.Contains(strings.Join(names, "|"), w) {
			t.Errorf("service %s: spans %q, want %q among them", service, names, w)
		}
	}
	if len(names) != len(want) {
		t.Errorf("service %s: %d spans %q, want %d", service, len(names), names, len(want))
	}
}
