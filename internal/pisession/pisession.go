// Package pisession maps a pi-coding-agent session file onto a turnlog
// log: the path from the root of pi's entry tree to a leaf, as the events
// `turnlog import --format pi-session` writes (docs/agent-hosts.md,
// "Importing pi-coding-agent sessions"). The pi package (pi-turnlog/src,
// mapping.ts and recorder.ts) writes the same events while pi runs; the
// golden logs of testdata/pi hold both writers to one output.
//
// file.go reads and migrates the file, mapping.go turns the path into
// events, and this file encodes and checks them.
package pisession

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Version is the newest pi-coding-agent session file version Read reads
// (pi-coding-agent 0.73.1 and 1.6 write version 3).
const Version = 3

// Session is a pi-coding-agent session file turned into a turn log.
type Session struct {
	// ID, Cwd and ParentSession are the header's: ParentSession is the
	// file a branched or forked session came from ("" for none).
	ID, Cwd, ParentSession string
	// Version is the file's version before migration (1, 2 or 3).
	Version int
	// Leaf is the id of the entry the imported path ends at.
	Leaf string
	// Events are the log: the entries on the path from the root to Leaf.
	Events []Event
	// Lines are the file lines Events come from (0 for events turnlog
	// adds: session/start, turn/start, turn/end).
	Lines []int
}

// Event is one event of the log: its type, and its JSON object without a
// seq (the log assigns seqs).
type Event struct {
	Type string
	JSON []byte
}

// Read reads a pi-coding-agent session file (JSON Lines: a
// {"type":"session"} header, then entries linked by id and parentId into a
// tree) and returns the path from the root to leaf — the file's last entry
// when leaf is "", as pi-coding-agent resumes it — as a turn log, mapped as
// docs/agent-hosts.md's table says: a session/start with the model pi
// resumes with and the header, a turn from each user message to the next,
// pi's messages as message events, the entries that change pi's context as
// context events, and every other entry kept as a "pi/<entry type>" event.
// Every event from an entry carries the entry's id and parentId in
// "piEntry". Versions 1 and 2 are migrated as pi-coding-agent migrates
// them: version 1 entries are chained in file order (with ids "v1-<line>")
// and a compaction's firstKeptEntryIndex becomes the firstKeptEntryId of
// the entry at that index, and version 2's hookMessage role becomes
// custom. name names the file in errors, which give its line and field,
// e.g. `chat.jsonl: line 7: parentId: no entry "a1b2c3d4" in the file`.
func Read(r io.Reader, name string, leaf string) (*Session, error) {
	entries, header, err := readPiEntries(r, name)
	if err != nil {
		return nil, err
	}
	s := &Session{ID: header.ID, Cwd: header.Cwd, ParentSession: header.ParentSession, Version: header.Version}
	path, err := piPath(entries, name, leaf)
	if err != nil {
		return nil, err
	}
	if len(path) > 0 {
		s.Leaf = path[len(path)-1].ID
	}
	if err := s.convert(header, path, name); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Session) add(line int, v map[string]any) {
	for k, x := range v {
		if str, ok := x.(string); ok && str == "" && k == "time" {
			delete(v, k)
		}
	}
	typ, _ := v["type"].(turnlog.EventType)
	if typ == "" {
		t, _ := v["type"].(string)
		typ = turnlog.EventType(t)
	}
	data, err := orderedEvent(v).MarshalJSON()
	if err != nil {
		// Every value is a Go value or JSON read from the file.
		panic(fmt.Sprintf("pisession: encode %s event: %v", typ, err))
	}
	s.Events = append(s.Events, Event{Type: string(typ), JSON: data})
	s.Lines = append(s.Lines, line)
}

// orderedEvent puts type, turn and time first, as hosts write them, so the
// log reads naturally; the rest follow in a fixed order.
type orderedEvent map[string]any

func (o orderedEvent) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	n := 0
	write := func(k string) error {
		v, ok := o[k]
		if !ok {
			return nil
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
		fmt.Fprintf(&buf, "%q:", k)
		if raw, ok := v.(json.RawMessage); ok {
			// pi's own JSON, byte for byte (json.Marshal would escape
			// <, > and & in it).
			return json.Compact(&buf, raw)
		}
		var value bytes.Buffer
		enc := json.NewEncoder(&value)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return err
		}
		buf.Write(unescapeSeparators(bytes.TrimSuffix(value.Bytes(), []byte("\n"))))
		return nil
	}
	for _, k := range []string{"type", "turn", "time", "adapter", "response", "origin", "content", "sections", "toolsAdded", "toolsRemoved",
		"toolCallId", "toolName", "isError", "details", "usage", "nestedCalls", "durationMs", "message",
		"firstKeptSeq", "tokensBefore", "systemMessage", "targetSeq", "replacement", "reason", "entry", "piSession", "piEntry"} {
		if err := write(k); err != nil {
			return nil, err
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// unescapeSeparators writes U+2028 and U+2029 as they are where
// encoding/json escapes them (it always does), as JavaScript's
// JSON.stringify, and so pi and the pi package, write them: what turnlog
// composes of pi's text is then written as pi writes that text.
func unescapeSeparators(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u202`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] != '\\' || i+1 == len(b):
			out = append(out, b[i])
		case i+5 < len(b) && (string(b[i+1:i+6]) == "u2028" || string(b[i+1:i+6]) == "u2029"):
			r := '\u2028'
			if b[i+5] == '9' {
				r = '\u2029'
			}
			out = utf8.AppendRune(out, r)
			i += 5
		default:
			// Any other escape, \\ included, as it is.
			out = append(out, b[i], b[i+1])
			i++
		}
	}
	return out
}

// check runs the log through turnlog's structure check, naming the file
// line an event came from.
func (s *Session) check(name string) error {
	v := turnlog.NewValidator()
	for i, ev := range s.Events {
		line := withSeq(ev.JSON, int64(i))
		e, err := turnlog.DecodeEvent(line)
		if err == nil {
			err = v.Check(&e)
		}
		if err != nil {
			if s.Lines[i] > 0 {
				return fmt.Errorf("%s: line %d: %w", name, s.Lines[i], err)
			}
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func withSeq(data []byte, seq int64) []byte {
	out := fmt.Appendf(nil, `{"seq":%d,`, seq)
	return append(out, data[1:]...)
}

// WriteLog writes events as a log file (JSON Lines, seqs from 0), the
// input of `turnlog import`, `turnlog replay` and the other offline tools.
func WriteLog(w io.Writer, events []Event) error {
	bw := bufio.NewWriter(w)
	for i, ev := range events {
		bw.Write(withSeq(ev.JSON, int64(i)))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}
