package pisession

import (
	"strings"
	"testing"
)

// Bad session files get one line naming the file, the line and the field.
func TestReadErrors(t *testing.T) {
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
			_, err := Read(strings.NewReader(tc.file), "s.jsonl", tc.leaf)
			if err == nil || err.Error() != tc.want {
				t.Errorf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

// Entries turnlog has no event for are kept, in place, inside the turn.
func TestReadKeepsUnknownEntries(t *testing.T) {
	file := `{"type":"session","version":3,"id":"s1","cwd":"/w"}
{"type":"model_change","id":"m1","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","provider":"openai","modelId":"gpt-5"}
{"type":"message","id":"u1","parentId":"m1","timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1767225601000}}
{"type":"label","id":"l1","parentId":"u1","timestamp":"2026-01-01T00:00:02.000Z","targetId":"u1","label":"start"}
`
	s, err := Read(strings.NewReader(file), "s.jsonl", "")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range s.Events {
		types = append(types, e.Type)
	}
	if got, want := strings.Join(types, " "), "session/start pi/model_change turn/start user/message pi/label turn/end"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if got := string(s.Events[4].JSON); !strings.Contains(got, `"turn":1`) || !strings.Contains(got, `"entry":{"type":"label","id":"l1"`) {
		t.Errorf("label event %s: want it in turn 1 with the entry", got)
	}
	if got := string(s.Events[5].JSON); !strings.Contains(got, `"reason":"aborted"`) {
		t.Errorf("turn/end %s: a turn without an answer ends aborted", got)
	}
}
