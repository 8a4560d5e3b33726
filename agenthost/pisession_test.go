package agenthost

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/worker"
)

// Bad session files get one line naming the file, the line and the field.
func TestReadPiSessionErrors(t *testing.T) {
	const hdr = `{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}` + "\n"
	const user = `{"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}` + "\n"
	for _, tc := range []struct{ name, file, leaf, want string }{
		{"empty", "", "", `s.jsonl: line 1: type: no {"type":"session"} header: not a pi-coding-agent session file`},
		{"not json", hdr + "{oops\n", "", "s.jsonl: line 2: not a JSON object"},
		{"no header", user, "", `s.jsonl: line 1: type: "message": the first line must be the {"type":"session"} header`},
		{"header without id", `{"type":"session","version":3}` + "\n", "", "s.jsonl: line 1: id: missing: the header needs the session's id"},
		{"newer version", `{"type":"session","version":4,"id":"x"}` + "\n", "", "s.jsonl: line 1: version: 4 is newer than this reader (3)"},
		{"bad version", `{"type":"session","version":"3","id":"x"}` + "\n", "", `s.jsonl: line 1: version: "3": want a positive integer`},
		{"no id", hdr + `{"type":"message","parentId":null,"message":{"role":"user","content":"x"}}` + "\n", "", "s.jsonl: line 2: id: missing: a version 3 entry needs an id"},
		{"duplicate id", hdr + user + user, "", `s.jsonl: line 3: id: "u1" is already the id of line 2`},
		{"missing parent", hdr + strings.Replace(user, `"parentId":null`, `"parentId":"zz"`, 1), "", `s.jsonl: line 2: parentId: no entry "zz" in the file`},
		{"bad time", hdr + strings.Replace(user, `2026-01-01T00:00:01.000Z`, `yesterday`, 1), "", `s.jsonl: line 2: timestamp: "yesterday" is not an RFC 3339 time`},
		{"no message", hdr + `{"type":"message","id":"m","parentId":null}` + "\n", "", "s.jsonl: line 2: message: missing"},
		{"bad stop reason", hdr + user + `{"type":"message","id":"a1","parentId":"u1","message":{"role":"assistant","content":[],"stopReason":"done"}}` + "\n", "",
			`s.jsonl: line 3: message.stopReason: "done" is not a pi-ai stop reason`},
		{"tool result without call id", hdr + user + `{"type":"message","id":"t1","parentId":"u1","message":{"role":"toolResult","content":[]}}` + "\n", "",
			"s.jsonl: line 3: message.toolCallId: missing"},
		{"wrong member type", hdr + `{"type":"message","id":7,"parentId":null,"message":{}}` + "\n", "", "s.jsonl: line 2: id: json: cannot unmarshal number into Go struct field piEntry.id of type string"},
		{"unknown leaf", hdr + user, "nope", `s.jsonl: --leaf "nope": no entry with that id`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadPiSession(strings.NewReader(tc.file), "s.jsonl", tc.leaf)
			if err == nil || err.Error() != tc.want {
				t.Errorf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

// Entries turnlog has no event for are kept, in place, inside the turn.
func TestReadPiSessionKeepsUnknownEntries(t *testing.T) {
	file := `{"type":"session","version":3,"id":"s1","cwd":"/w"}
{"type":"model_change","id":"m1","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","provider":"openai","modelId":"gpt-5"}
{"type":"message","id":"u1","parentId":"m1","timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1767225601000}}
{"type":"label","id":"l1","parentId":"u1","timestamp":"2026-01-01T00:00:02.000Z","targetId":"u1","label":"start"}
`
	s, err := ReadPiSession(strings.NewReader(file), "s.jsonl", "")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range s.Events {
		types = append(types, e.Type())
	}
	if got, want := strings.Join(types, " "), "session/start pi/model_change turn/start user/message pi/label turn/end"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if got := string(s.Events[4].data); !strings.Contains(got, `"turn":1`) || !strings.Contains(got, `"entry":{"type":"label","id":"l1"`) {
		t.Errorf("label event %s: want it in turn 1 with the entry", got)
	}
	if got := string(s.Events[5].data); !strings.Contains(got, `"reason":"aborted"`) {
		t.Errorf("turn/end %s: a turn without an answer ends aborted", got)
	}
}

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
