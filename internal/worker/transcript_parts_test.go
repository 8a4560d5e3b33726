package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// wholeReplay is what `turnlog replay` gives for the log through its head.
func wholeReplay(t *testing.T, data []byte) derived.Transcript {
	t.Helper()
	var diags []replay.Diagnostic
	res, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(data)).All(), replay.Options{Through: replay.Head,
		OnDiagnostic: func(d replay.Diagnostic) { diags = append(diags, d) }})
	if err != nil {
		t.Fatal(err)
	}
	if diags == nil {
		diags = []replay.Diagnostic{}
	}
	return derived.Transcript{Result: res, Diagnostics: diags}
}

// partsOf lists the transcript objects stored for target, checkpoint aside.
func partsOf(log *memLog, target turnlog.Adapter) []string {
	var names []string
	for _, k := range keys(log.objects) {
		if strings.HasPrefix(k, derived.TranscriptDir(target)+"/") && k != derived.ReplayCheckpointName(target) {
			names = append(names, k)
		}
	}
	return names
}

// A Session the workers follow turn by turn is replayed by one run per
// turn. Its transcript stays in a handful of parts — about log2 of its
// messages — so a host reads it in a few requests however many runs there
// were; every message is rewritten only about log2 times in all; nothing
// but the listed parts is left in the store; and after every run the
// stored transcript is the whole log's, diagnostics and counts included.
func TestTranscriptOfARunPerTurnStaysInFewParts(t *testing.T) {
	ctx := context.Background()
	data := repeatTurns(t, 700, "")
	all := bytes.SplitAfter(data, []byte("\n"))
	log := newMemLog(t, nil)
	written := 0
	log.onPut = func(name string, data []byte) {
		if strings.HasSuffix(name, ".jsonl") {
			written += len(data)
		}
	}
	runs := 0
	for i, line := range all {
		if len(line) == 0 {
			continue
		}
		log.append(t, line)
		if !bytes.Contains(line, []byte(`"type":"turn/end"`)) {
			continue
		}
		if _, err := Replay(ctx, log, turnlog.Adapter{}); err != nil {
			t.Fatal(err)
		}
		runs++
		tr, err := derived.LoadTranscript(ctx, log, turnlog.Adapter{})
		if err != nil {
			t.Fatalf("after the run through line %d: %v", i+1, err)
		}
		var state derived.ReplayState
		if err := json.Unmarshal(log.objects[derived.ReplayCheckpointName(turnlog.Adapter{})], &state); err != nil {
			t.Fatal(err)
		}
		if limit := bits.Len(uint(len(tr.Messages))) + 1; len(state.Parts) > limit {
			t.Fatalf("after %d runs: %d parts for %d messages, want at most %d", runs, len(state.Parts), len(tr.Messages), limit)
		}
		if got := partsOf(log, turnlog.Adapter{}); len(got) != len(state.Parts) {
			t.Fatalf("after %d runs: %d transcript objects stored, %d listed: %v", runs, len(got), len(state.Parts), got)
		}
		if runs%25 == 0 || i == len(all)-2 {
			whole := wholeReplay(t, bytes.Join(all[:i+1], nil))
			if !equalJSON(tr, whole) {
				t.Fatalf("after %d runs the stored transcript differs from a whole replay", runs)
			}
		}
	}
	tr, err := derived.LoadTranscript(ctx, log, turnlog.Adapter{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Counts.Degraded == 0 || len(tr.Diagnostics) == 0 {
		t.Fatalf("counts %+v, %d diagnostics: the test log has a degraded message", tr.Counts, len(tr.Diagnostics))
	}
	stored := 0
	for _, name := range partsOf(log, turnlog.Adapter{}) {
		stored += len(log.objects[name])
	}
	if limit := stored * (bits.Len(uint(len(tr.Messages))) + 2); written > limit {
		t.Fatalf("%d runs wrote %d bytes of parts for a transcript of %d bytes, want at most %d", runs, written, stored, limit)
	}
	t.Logf("%d runs, %d messages in %d parts; %d bytes stored, %d written in all", runs, len(tr.Messages), len(partsOf(log, turnlog.Adapter{})), stored, written)
}

// A run whose messages are more than a part holds stores several parts,
// none over the bound, read back as one transcript.
func TestALargeRunIsSplitIntoParts(t *testing.T) {
	ctx := context.Background()
	data := repeatTurns(t, 300, strings.Repeat("why ", 10_000)) // 12 MB of questions
	log := newMemLog(t, data)
	if _, err := Replay(ctx, log, turnlog.Adapter{}); err != nil {
		t.Fatal(err)
	}
	names := partsOf(log, turnlog.Adapter{})
	if len(names) < 2 {
		t.Fatalf("%d parts for a %d-byte log, want it split (at %d bytes)", len(names), len(data), derived.MaxPartBytes)
	}
	for _, name := range names {
		if n := len(log.objects[name]); n > derived.MaxPartBytes+derived.MaxPartBytes/4 {
			t.Errorf("%s is %d bytes, over the bound of %d (+ header)", name, n, derived.MaxPartBytes)
		}
	}
	tr, err := derived.LoadTranscript(ctx, log, turnlog.Adapter{})
	if err != nil {
		t.Fatal(err)
	}
	if !equalJSON(tr, wholeReplay(t, data)) {
		t.Fatal("the transcript read from split parts differs from a whole replay")
	}
}

// A part that is not what its checkpoint lists is refused with the object
// and line named; it is never handed out as messages. A damaged object
// fails its CRC; one whose CRC the checkpoint was made to match (a writer
// bug, a hand-edited bucket) fails the checks of its structure. The next
// run that has to read it replays the log again.
func TestABadPartIsRefused(t *testing.T) {
	ctx := context.Background()
	data := loggen.Log(200, 7)
	for _, c := range []struct {
		name    string
		corrupt func(b []byte) []byte
		fixCRC  bool
		want    string
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)-10] }, false, "not the part the replay run wrote"},
		{"a message changed", func(b []byte) []byte {
			return bytes.Replace(b, []byte("\n{\"role\":"), []byte("\n{\"role\" "), 1)
		}, false, "not the part the replay run wrote"},
		{"truncated, CRC matched", func(b []byte) []byte { return b[:len(b)-10] }, true, "line 1: the part holds"},
		{"no header", func(b []byte) []byte { return []byte("{}") }, true, "line 1: no header line"},
		{"header not JSON", func(b []byte) []byte { return append([]byte("{\n"), b...) }, true, "line 1:"},
		{"forged length", func(b []byte) []byte {
			return regexp.MustCompile(`"bytes":\[\d+`).ReplaceAll(b, []byte(`"bytes":[9223372036854775807`))
		}, true, "do not end at a line's end"},
		{"columns disagree", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"roles":[`), []byte(`"roles":["user",`), 1)
		}, true, "line 1: the header lists"},
		{"a line more", func(b []byte) []byte { return append(b, "{}\n"...) }, true, "line 1: the part holds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := newMemLog(t, data)
			if _, err := Replay(ctx, log, turnlog.Adapter{}); err != nil {
				t.Fatal(err)
			}
			names := partsOf(log, turnlog.Adapter{})
			if len(names) != 1 {
				t.Fatalf("%d parts, want 1", len(names))
			}
			bad := c.corrupt(log.objects[names[0]])
			log.objects[names[0]] = bad
			if c.fixCRC {
				name := derived.ReplayCheckpointName(turnlog.Adapter{})
				var state derived.ReplayState
				if err := json.Unmarshal(log.objects[name], &state); err != nil {
					t.Fatal(err)
				}
				state.Parts[0].CRC32C = crc32.Checksum(bad, crc32.MakeTable(crc32.Castagnoli))
				log.objects[name], _ = json.Marshal(state)
			}
			_, err := derived.LoadTranscript(ctx, log, turnlog.Adapter{})
			if !errors.Is(err, derived.ErrUnusable) || !strings.Contains(err.Error(), names[0]) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("LoadTranscript of a part %s = %v; want one line naming %s and %q", c.name, err, names[0], c.want)
			}
			// The next run's part is bigger than the bad one, so the run
			// merges the two, finds the bad one and starts over.
			more := loggen.Log(1000, 7)
			log.append(t, lines(more, len(log.events), countLines(more)))
			if _, err := Replay(ctx, log, turnlog.Adapter{}); err != nil {
				t.Fatalf("a run over a bad part: %v", err)
			}
			tr, err := derived.LoadTranscript(ctx, log, turnlog.Adapter{})
			if err != nil {
				t.Fatal(err)
			}
			if !equalJSON(tr, wholeReplay(t, more)) {
				t.Fatal("after the run the transcript differs from a whole replay")
			}
		})
	}
}

// A host reading while a run merges parts may find a part it was told of
// already deleted: it reads the new checkpoint and gets the newer
// transcript, not an error.
func TestReadingWhileARunMergesParts(t *testing.T) {
	ctx := context.Background()
	data := loggen.Log(300, 3)
	all := bytes.SplitAfter(data, []byte("\n"))
	inner := newMemLog(t, nil)
	for _, line := range all[:len(all)-1] {
		inner.append(t, line)
		if bytes.Contains(line, []byte(`"type":"turn/end"`)) {
			if _, err := Replay(ctx, inner, turnlog.Adapter{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One more turn, whose run merges every part into one.
	more := loggen.Log(2000, 3)
	log := &hookLog{memLog: inner}
	ran := false
	log.beforeGet = func(name string) {
		if ran || !strings.HasSuffix(name, ".jsonl") {
			return
		}
		ran = true
		inner.append(t, lines(more, len(inner.events), countLines(more)))
		if _, err := Replay(ctx, inner, turnlog.Adapter{}); err != nil {
			t.Error(err)
		}
		if n := len(partsOf(inner, turnlog.Adapter{})); n > 3 {
			t.Errorf("%d parts after the merging run", n)
		}
	}
	tr, err := derived.LoadTranscript(ctx, log, turnlog.Adapter{})
	if err != nil {
		t.Fatalf("LoadTranscript while a run merged: %v", err)
	}
	if !ran || !equalJSON(tr, wholeReplay(t, more)) {
		t.Fatalf("ran %v: the transcript read is not the newer one", ran)
	}
}

// hookLog serialises a memLog's reads, which derived.LoadTranscript makes at once,
// and calls beforeGet before each.
type hookLog struct {
	*memLog
	mu        sync.Mutex
	beforeGet func(name string)
}

func (l *hookLog) GetDerived(ctx context.Context, name string, limit int64) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.beforeGet(name)
	return l.memLog.GetDerived(ctx, name, limit)
}

func countLines(data []byte) int { return bytes.Count(data, []byte("\n")) }

// repeatTurns returns a log of n turns made of the two turns of
// legacy-flat-state.jsonl: every seventh one's message degrades (a legacy
// replay state), the others replay natively from their envelope. A
// question, if not empty, replaces the user's text.
func repeatTurns(t *testing.T, n int, question string) []byte {
	t.Helper()
	all := bytes.SplitAfter(testLog(t, "legacy-flat-state.jsonl"), []byte("\n"))
	degraded, native := all[1:5], all[5:12]
	seqField, turnField := regexp.MustCompile(`^\{"seq":\d+,`), regexp.MustCompile(`"turn":\d+,`)
	out := bytes.Clone(all[0])
	seq := 1
	for turn := 1; turn <= n; turn++ {
		lines := native
		if turn%7 == 1 {
			lines = degraded
		}
		for _, line := range lines {
			if question != "" {
				line = bytes.Replace(line, []byte(`"Why does the build fail?"`), []byte(`"`+question+`"`), 1)
				line = bytes.Replace(line, []byte(`"How do I fix it?"`), []byte(`"`+question+`"`), 1)
			}
			line = seqField.ReplaceAll(line, fmt.Appendf(nil, `{"seq":%d,`, seq))
			out = append(out, turnField.ReplaceAll(line, fmt.Appendf(nil, `"turn":%d,`, turn))...)
			seq++
		}
	}
	return out
}
