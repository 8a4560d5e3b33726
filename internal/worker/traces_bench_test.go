package worker

import (
	"bytes"
	"context"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/turnlog/turnlog/internal/telemetry"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
)

// BenchmarkAssembleTraced is an assembly run over a generated log of
// about 1,000 turns (text, thinking, tool calls and their results), without
// an export, with one (the spans built and exported to an in-memory
// exporter, flushed before the run counts as done), and with content
// captured. It reports the CPU (user and system, all goroutines) per 1,000
// turns and the spans per turn (docs/benchmarks.md, "Traces"):
//
//	go test ./internal/worker/ -run '^$' -bench BenchmarkAssembleTraced -benchtime 20x -count 5
func BenchmarkAssembleTraced(b *testing.B) {
	data := loggen.Log(85_000, 11)
	turns := float64(bytes.Count(data, []byte(`"type":"turn/end"`)))
	b.Logf("%d events, %.0f turns", bytes.Count(data, []byte("\n")), turns)
	for _, c := range []struct {
		name            string
		export, capture bool
	}{{"off", false, false}, {"export", true, false}, {"export+content", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			var exp *tracetest.InMemoryExporter
			var tel *telemetry.Telemetry
			if c.export {
				exp = tracetest.NewInMemoryExporter()
				tel = telemetry.StartWith(exp, "bench", c.capture)
				defer func() { _ = tel.Shutdown(context.Background()) }()
			}
			ctx := context.Background()
			var spans int
			var cpu time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				log := newMemLog(b, data)
				start := cpuTime()
				b.StartTimer()
				if _, err := AssembleWith(ctx, log, traced); err != nil {
					b.Fatal(err)
				}
				if tel != nil {
					if err := tel.ForceFlush(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				cpu += cpuTime() - start
				if exp != nil {
					spans += len(exp.GetSpans())
					exp.Reset()
				}
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(b.N)*1000/turns, "cpu-ms/1000turns")
			b.ReportMetric(float64(spans)/float64(b.N)/turns, "spans/turn")
		})
	}
}

// cpuTime is the process's user and system CPU so far.
func cpuTime() time.Duration {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
