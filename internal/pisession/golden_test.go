package pisession

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/pi/logs from the importer")

// goldenDir holds pi session files (sessions/) and, by the same names, the
// logs both of turnlog's writers of pi sessions write from them (logs/):
// the importer here, the pi package's recorder in
// pi-turnlog/test/golden.test.ts (`make test-pi`). Its README says where
// the sessions come from and what the recorder's comparison leaves out.
const goldenDir = "../../testdata/pi"

// TestGoldenLogs: the importer writes each golden log, byte for byte, from
// its pi session file. `go test ./internal/pisession -run TestGoldenLogs
// -update` rewrites the logs; the pi package's test then says whether the
// recorder writes the same.
func TestGoldenLogs(t *testing.T) {
	sessions, _ := filepath.Glob(filepath.Join(goldenDir, "sessions", "*.jsonl"))
	logs, _ := filepath.Glob(filepath.Join(goldenDir, "logs", "*.jsonl"))
	if len(sessions) == 0 {
		t.Fatalf("no pi sessions in %s/sessions", goldenDir)
	}
	for _, l := range logs {
		if !*update && !slices.Contains(sessions, filepath.Join(goldenDir, "sessions", filepath.Base(l))) {
			t.Errorf("%s: no session of that name in %s/sessions", l, goldenDir)
		}
	}
	for _, file := range sessions {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			s, err := Read(f, name, "")
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := WriteLog(&got, s.Events); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join(goldenDir, "logs", name)
			if *update {
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			g, w := bytes.Split(got.Bytes(), []byte("\n")), bytes.Split(want, []byte("\n"))
			for i := range max(len(g), len(w)) {
				gl, wl := line(g, i), line(w, i)
				if !bytes.Equal(gl, wl) {
					t.Fatalf("line %d differs from %s (-update rewrites it):\n   got %s\n  want %s", i+1, golden, gl, wl)
				}
			}
		})
	}
}

func line(lines [][]byte, i int) []byte {
	if i < len(lines) {
		return lines[i]
	}
	return nil
}
