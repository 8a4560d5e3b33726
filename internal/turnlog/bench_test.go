package turnlog_test

import (
	"bytes"
	"encoding/json"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// benchLog is a generated 100,000-event session: pi-ai shaped streams,
// version-2 envelopes and tool results of a few kilobytes.
var benchLog = sync.OnceValue(func() []byte { return loggen.Log(100_000, 1) })

// BenchmarkDecode decodes the same log several ways in one run: turnlog's
// decoder (alone, and behind the validating Reader), encoding/json into the
// same concrete struct, and encoding/json into map[string]any — what one
// would write first, and the baseline the decoder is measured against.
func BenchmarkDecode(b *testing.B) {
	data := benchLog()
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	perLine := func(b *testing.B, decode func(line []byte) error) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			for _, line := range lines {
				if err := decode(line); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(len(lines))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	}
	b.Run("turnlog", func(b *testing.B) {
		perLine(b, func(line []byte) error { _, err := turnlog.DecodeEvent(line); return err })
	})
	b.Run("turnlog-reader", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		events := 0
		for b.Loop() {
			for _, err := range turnlog.NewReader(bytes.NewReader(data)).All() {
				if err != nil {
					b.Fatal(err)
				}
				events++
			}
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("encoding-json-struct", func(b *testing.B) {
		perLine(b, func(line []byte) error { var w turnlog.WireEvent; return json.Unmarshal(line, &w) })
	})
	b.Run("encoding-json-map", func(b *testing.B) {
		perLine(b, func(line []byte) error { var m map[string]any; return json.Unmarshal(line, &m) })
	})
}

// BenchmarkDecodeInterleaved decodes the same log with each decoder in turn,
// 500 lines at a time, and times each decoder separately. On a shared,
// busy machine the load then falls on all decoders alike, so the reported
// throughputs and the speedup over map[string]any are comparable even when
// the absolute numbers are not. A collection before each timed batch keeps
// one decoder's garbage from being collected on another's clock.
func BenchmarkDecodeInterleaved(b *testing.B) {
	data := benchLog()
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	decoders := []struct {
		name   string
		decode func(line []byte) error
	}{
		{"turnlog", func(line []byte) error { _, err := turnlog.DecodeEvent(line); return err }},
		{"encoding-json-struct", func(line []byte) error { var w turnlog.WireEvent; return json.Unmarshal(line, &w) }},
		{"encoding-json-map", func(line []byte) error { var m map[string]any; return json.Unmarshal(line, &m) }},
	}
	elapsed := make([]time.Duration, len(decoders))
	for b.Loop() {
		for start := 0; start < len(lines); start += 500 {
			batch := lines[start:min(start+500, len(lines))]
			for i, d := range decoders {
				runtime.GC()
				t0 := time.Now()
				for _, line := range batch {
					if err := d.decode(line); err != nil {
						b.Fatal(err)
					}
				}
				elapsed[i] += time.Since(t0)
			}
		}
	}
	for i, d := range decoders {
		b.ReportMetric(float64(len(data))*float64(b.N)/elapsed[i].Seconds()/1e6, d.name+"-MB/s")
	}
	b.ReportMetric(elapsed[2].Seconds()/elapsed[0].Seconds(), "x-speedup-vs-map")
}
