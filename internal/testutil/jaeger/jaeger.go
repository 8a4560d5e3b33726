// Package jaeger runs a real Jaeger for tests and `make dev JAEGER=1`:
// Jaeger's own binary (its OTLP receivers over gRPC and HTTP, its query
// API, its in-memory storage) on 127.0.0.1 and free ports, and reads back
// what it stored through its query API and what it received through its
// own metrics.
//
// The binary is built on first use from hack/jaeger, a Go module of its
// own that pins the release, into the user cache directory (about 8
// minutes on 2 cores the first time), so the product's go.mod never holds
// Jaeger's dependencies. Its UI assets are not part of its Go module: the
// binary serves the query API and a placeholder page.
package jaeger

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/turnlog/turnlog/internal/testutil/toolbin"
)

const (
	// Module and Version name the release the harness builds and runs.
	Module  = "github.com/jaegertracing/jaeger"
	Version = "v1.75.0"
)

// Jaeger is a running Jaeger.
type Jaeger struct {
	// OTLPGRPC and OTLPHTTP are its OTLP receivers' base URLs, for
	// --otlp-endpoint with the grpc and http/protobuf protocols.
	OTLPGRPC, OTLPHTTP string
	// Query is its query API's base URL (and the UI's, where built in).
	Query string
	// metrics is its own Prometheus endpoint.
	metrics string
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// TB is what Start needs of a test.
type TB interface {
	Helper()
	Log(args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// Start builds Jaeger if needed and starts it; it is stopped when the test
// ends.
func Start(tb TB) *Jaeger {
	tb.Helper()
	bin, err := Binary(func(msg string) { tb.Log(msg); fmt.Fprintln(os.Stderr, msg) })
	if err != nil {
		tb.Fatalf("jaeger: %v", err)
	}
	j, err := Run(bin, tb.TempDir())
	if err != nil {
		tb.Fatalf("jaeger: %v", err)
	}
	tb.Cleanup(j.Stop)
	return j
}

// Run starts the binary bin with its config and log in dir, and returns
// once its query API answers.
func Run(bin, dir string) (*Jaeger, error) {
	var lastErr error
	for range 3 { // a free port can be taken between probing and binding
		ports, err := freePorts(5)
		if err != nil {
			return nil, err
		}
		j := &Jaeger{
			OTLPGRPC: "http://127.0.0.1:" + ports[0], OTLPHTTP: "http://127.0.0.1:" + ports[1],
			Query: "http://127.0.0.1:" + ports[2], metrics: "http://127.0.0.1:" + ports[4] + "/metrics",
			logPath: filepath.Join(dir, "jaeger-"+ports[2]+".log"),
		}
		config := filepath.Join(dir, "jaeger-"+ports[2]+".yaml")
		if err := os.WriteFile(config, []byte(configFor(ports)), 0o644); err != nil {
			return nil, err
		}
		if lastErr = j.launch(bin, config); lastErr == nil {
			return j, nil
		}
		j.Stop()
	}
	return nil, lastErr
}

// configFor is a Jaeger with OTLP receivers, memory storage and its
// query API on ports: OTLP gRPC, OTLP HTTP, query HTTP, query gRPC, its
// own metrics.
func configFor(ports []string) string {
	return `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: detailed
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: ` + ports[4] + `
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:` + ports[2] + `
    grpc:
      endpoint: 127.0.0.1:` + ports[3] + `
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:` + ports[0] + `
      http:
        endpoint: 127.0.0.1:` + ports[1] + `
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`
}

func (j *Jaeger) launch(bin, config string) error {
	logFile, err := os.Create(j.logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	j.cmd = exec.Command(bin, "--config", config)
	j.cmd.Stdout, j.cmd.Stderr = logFile, logFile
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := j.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	j.exited = make(chan struct{})
	go func() { _ = j.cmd.Wait(); close(j.exited) }()
	deadline := time.After(60 * time.Second)
	for {
		if _, err := j.Services(); err == nil {
			return nil
		}
		select {
		case <-j.exited:
			out, _ := os.ReadFile(j.logPath)
			return fmt.Errorf("jaeger exited; its log:\n%s", toolbin.Tail(out, 2000))
		case <-deadline:
			return fmt.Errorf("jaeger's query API at %s did not answer in 60s", j.Query)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops Jaeger.
func (j *Jaeger) Stop() {
	if j.cmd == nil || j.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-j.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-j.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
		<-j.exited
	}
	j.cmd = nil
}

// Services are the services Jaeger holds spans of.
func (j *Jaeger) Services() ([]string, error) {
	var out struct{ Data []string }
	return out.Data, j.get("/api/services", &out)
}

// Trace is a trace as the query API returns it.
type Trace struct {
	TraceID string `json:"traceID"`
	Spans   []Span `json:"spans"`
	// Processes are the senders of its spans, by Span.ProcessID.
	Processes map[string]Process `json:"processes"`
}

// Process is a sender of spans: a service.
type Process struct {
	ServiceName string `json:"serviceName"`
}

// Service is the service that sent s, one of the trace's spans.
func (tr Trace) Service(s Span) string { return tr.Processes[s.ProcessID].ServiceName }

// Span is a span as the query API returns it.
type Span struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []Reference `json:"references"`
	Tags          []Tag       `json:"tags"`
	StartTime     int64       `json:"startTime"`
	Duration      int64       `json:"duration"`
	ProcessID     string      `json:"processID"`
}

// Reference is a span's parent (CHILD_OF) or link (FOLLOWS_FROM).
type Reference struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// Tag is an attribute.
type Tag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// Tag returns the value of the span's tag key as text, "" when absent.
func (s Span) Tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// Traces are the traces of service holding a span with every tag of
// tags (nil: all), up to limit.
func (j *Jaeger) Traces(service string, tags map[string]string, limit int) ([]Trace, error) {
	q := url.Values{"service": {service}, "limit": {strconv.Itoa(limit)}, "lookback": {"custom"},
		"start": {"0"}, "end": {strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)}}
	if len(tags) > 0 {
		data, _ := json.Marshal(tags)
		q.Set("tags", string(data))
	}
	var out struct{ Data []Trace }
	return out.Data, j.get("/api/traces?"+q.Encode(), &out)
}

// RawSpan is a span as Jaeger stored it.
type RawSpan struct {
	TraceID string `json:"traceId"`
	SpanID  string `json:"spanId"`
	Name    string `json:"name"`
}

// RawSpans are the spans Jaeger stored for service, as they were
// received: through the v3 API's raw_traces, which leaves out the
// adjustments its other answers make, among them the removal of spans
// received twice with the same bytes.
func (j *Jaeger) RawSpans(service string) ([]RawSpan, error) {
	q := url.Values{"query.service_name": {service}, "query.raw_traces": {"true"}, "query.num_traces": {"1000"},
		"query.start_time_min": {time.Unix(0, 0).UTC().Format(time.RFC3339)},
		"query.start_time_max": {time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}}
	var out struct {
		Result struct {
			ResourceSpans []struct {
				ScopeSpans []struct {
					Spans []RawSpan `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		} `json:"result"`
	}
	if err := j.get("/api/v3/traces?"+q.Encode(), &out); err != nil {
		return nil, err
	}
	var spans []RawSpan
	for _, rs := range out.Result.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			spans = append(spans, ss.Spans...)
		}
	}
	return spans, nil
}

// AcceptedSpans is how many spans Jaeger's OTLP receivers accepted, by
// its own metrics: every span received, duplicates included, whatever the
// query API shows of them.
func (j *Jaeger) AcceptedSpans() (int64, error) {
	resp, err := http.Get(j.metrics)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var total float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "otelcol_receiver_accepted_spans") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		total += v
	}
	return int64(total), sc.Err()
}

func (j *Jaeger) get(path string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.Query+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, "/api/v3/traces?") {
		return nil // the v3 API's answer for no traces
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Binary returns the path of the Jaeger binary, building it first from
// hack/jaeger if it is missing or another version. progress is told
// before a slow build.
func Binary(progress func(string)) (string, error) {
	module, err := toolsModule()
	if err != nil {
		return "", err
	}
	return toolbin.Tool{
		Name: "jaeger", Module: Module, Version: Version,
		About: fmt.Sprintf("building %s/cmd/jaeger@%s from %s (about 8 minutes the first time)", Module, Version, module),
		Build: func(_, bin string) error {
			cmd := exec.Command("go", "build", "-o", bin, Module+"/cmd/jaeger")
			cmd.Dir = module
			cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOWORK=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go build %s/cmd/jaeger: %w\n%s", Module, err, toolbin.Tail(out, 4000))
			}
			return nil
		},
	}.Path(progress)
}

// toolsModule is hack/jaeger of the tree this file is in.
func toolsModule() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot find hack/jaeger: no source path")
	}
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "hack", "jaeger")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("cannot find hack/jaeger's go.mod: %w", err)
	}
	return dir, nil
}

func freePorts(n int) ([]string, error) {
	var ports []string
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}
