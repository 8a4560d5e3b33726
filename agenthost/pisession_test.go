package agenthost

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/worker"
)

// A version-1 file names a compaction's first kept entry by its index in
// the file (the header at 0); pi migrates it to that entry's id, and so
// does the import: the transcript is the summary, then U3 and A3, then
// what came after, as pi resumes.
func TestVersion1CompactionKeepsByIndex(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"type":"session","version":1,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}` + "\n")
	n := 0
	msg := func(role, content string) {
		n++
		ts := fmt.Sprintf("2026-01-01T00:00:%02d.000Z", n)
		switch role {
		case "user":
			fmt.Fprintf(&b, `{"type":"message","timestamp":%q,"message":{"role":"user","content":%q,"timestamp":%d}}`+"\n", ts, content, 1767225600000+int64(n)*1000)
		default:
			fmt.Fprintf(&b, `{"type":"message","timestamp":%q,"message":{"role":"assistant","content":[{"type":"text","text":%q}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop","timestamp":%d}}`+"\n",
				ts, content, 1767225600000+int64(n)*1000)
		}
	}
	for i := 1; i <= 3; i++ {
		msg("user", fmt.Sprintf("U%d", i))
		msg("assistant", fmt.Sprintf("A%d", i))
	}
	// U3 is the file's entry 5: the header, U1 A1 U2 A2, then U3.
	b.WriteString(`{"type":"compaction","timestamp":"2026-01-01T00:00:30.000Z","summary":"U1 and U2 were answered.","firstKeptEntryIndex":5,"tokensBefore":900}` + "\n")
	msg("user", "U4")
	msg("assistant", "A4")

	s, err := ReadPiSession(strings.NewReader(b.String()), "v1.jsonl", "")
	if err != nil {
		t.Fatal(err)
	}
	l := openTestLog(t, memBucket(t))
	ctx := context.Background()
	if err := l.Import(ctx, s.Events); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Replay(ctx, l.workerLog(), l.target); err != nil {
		t.Fatal(err)
	}
	tr, err := l.Transcript(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range tr.Messages {
		var v struct {
			Content json.RawMessage `json:"content"`
		}
		_ = json.Unmarshal(m.Message, &v)
		text := string(v.Content)
		for _, word := range []string{"U1 and U2 were answered.", "U3", "A3", "U4", "A4", "U1", "A1", "U2", "A2"} {
			if strings.Contains(text, word) {
				text = word
				break
			}
		}
		got = append(got, m.Role+":"+text)
	}
	if want := "user:U1 and U2 were answered. user:U3 assistant:A3 user:U4 assistant:A4"; strings.Join(got, " ") != want {
		t.Errorf("transcript %s\nwant       %s", strings.Join(got, " "), want)
	}
}
