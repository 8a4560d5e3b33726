package pisession

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// piHeader is the file's {"type":"session"} line; raw is the line.
type piHeader struct {
	ID            string `json:"id"`
	Cwd           string `json:"cwd"`
	ParentSession string `json:"parentSession"`
	Version       int    `json:"-"`
	raw           json.RawMessage
}

// piEntry is one entry with the members turnlog reads; raw is the line.
type piEntry struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	ParentID  *string         `json:"parentId"`
	Timestamp string          `json:"timestamp"`
	Message   json.RawMessage `json:"message"`
	line      int
	raw       json.RawMessage
}

// piMessage is an entry's message, with the members turnlog reads.
type piMessage struct {
	Role        string          `json:"role"`
	Content     json.RawMessage `json:"content"`
	ToolCallID  string          `json:"toolCallId"`
	ToolName    string          `json:"toolName"`
	IsError     bool            `json:"isError"`
	Details     json.RawMessage `json:"details"`
	Usage       json.RawMessage `json:"usage"`
	NestedCalls json.RawMessage `json:"nestedCalls"`
	DurationMs  json.RawMessage `json:"durationMs"`
	API         string          `json:"api"`
	Provider    string          `json:"provider"`
	Model       string          `json:"model"`
	StopReason  string          `json:"stopReason"`
	Timestamp   json.RawMessage `json:"timestamp"`

	// system messages
	Sections     json.RawMessage `json:"sections"`
	ToolsAdded   json.RawMessage `json:"toolsAdded"`
	ToolsRemoved json.RawMessage `json:"toolsRemoved"`

	// custom (extension) and bashExecution messages
	CustomType         string          `json:"customType"`
	Command            string          `json:"command"`
	Output             string          `json:"output"`
	ExitCode           json.RawMessage `json:"exitCode"`
	Cancelled          bool            `json:"cancelled"`
	Truncated          bool            `json:"truncated"`
	FullOutputPath     string          `json:"fullOutputPath"`
	ExcludeFromContext bool            `json:"excludeFromContext"`
}

// piContextEntry holds the members of the entries that change the context:
// compaction, branch_summary, custom_message, context_edit, model_change.
type piContextEntry struct {
	Summary          string          `json:"summary"`
	FirstKeptEntryID string          `json:"firstKeptEntryId"`
	TokensBefore     *int64          `json:"tokensBefore"`
	SystemMessage    json.RawMessage `json:"systemMessage"`
	CustomType       string          `json:"customType"`
	Content          json.RawMessage `json:"content"`
	TargetID         string          `json:"targetId"`
	Replacement      json.RawMessage `json:"replacement"`
	Provider         string          `json:"provider"`
	ModelID          string          `json:"modelId"`
}

// lineErr is an error about a line of the file, and its field if named.
func lineErr(name string, line int, field, format string, args ...any) error {
	if field == "" {
		return fmt.Errorf("%s: line %d: %s", name, line, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%s: line %d: %s: %s", name, line, field, fmt.Sprintf(format, args...))
}

// readPiEntries reads and migrates the file's entries.
func readPiEntries(r io.Reader, name string) ([]*piEntry, piHeader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var header piHeader
	var entries []*piEntry
	headerLine := 0
	for line := 1; ; line++ {
		raw, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, header, fmt.Errorf("%s: line %d: %w", name, line, err)
		}
		if len(raw) == 0 && errors.Is(err, io.EOF) {
			break
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 {
			if e := parsePiLine(raw, name, line, headerLine == 0, &header); e != nil {
				if e.err != nil {
					return nil, header, e.err
				}
				entries = append(entries, e.entry)
			} else {
				headerLine = line
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if headerLine == 0 {
		return nil, header, fmt.Errorf(`%s: line 1: type: no {"type":"session"} header: not a pi-coding-agent session file`, name)
	}
	if header.Version > Version {
		return nil, header, lineErr(name, headerLine, "version", "%d is newer than this reader (%d)", header.Version, Version)
	}
	if header.Version < Version {
		// pi-coding-agent's migrations leave the header at the version they
		// migrate to.
		var err error
		if header.raw, err = withMember(header.raw, "version", []byte(strconv.Itoa(Version))); err != nil {
			return nil, header, lineErr(name, headerLine, "", "%v", err)
		}
	}
	seen := map[string]int{}
	for i, e := range entries {
		if header.Version < 2 {
			// Version 1 has no tree: entries follow each other.
			e.ID = "v1-" + strconv.Itoa(e.line)
			if i > 0 {
				prev := entries[i-1].ID
				e.ParentID = &prev
			}
		} else if e.ID == "" {
			return nil, header, lineErr(name, e.line, "id", "missing: a version %d entry needs an id", header.Version)
		}
		if l, dup := seen[e.ID]; dup {
			return nil, header, lineErr(name, e.line, "id", "%q is already the id of line %d", e.ID, l)
		}
		seen[e.ID] = e.line
		if header.Version < 2 && e.Type == "compaction" {
			if err := keptByIndex(entries, i); err != nil {
				return nil, header, lineErr(name, e.line, "firstKeptEntryIndex", "%v", err)
			}
		}
	}
	return entries, header, nil
}

// keptByIndex migrates the version-1 compaction entries[i] as pi-coding-agent
// does: its firstKeptEntryIndex, a position among the file's entries with
// the header at 0, becomes the firstKeptEntryId of the entry there, if that
// entry has an id by then (it is not after the compaction). Any other
// value names no entry, and the compaction keeps nothing before itself.
func keptByIndex(entries []*piEntry, i int) error {
	var c struct {
		FirstKeptEntryIndex json.RawMessage `json:"firstKeptEntryIndex"`
	}
	if err := json.Unmarshal(entries[i].raw, &c); err != nil {
		return err
	}
	k, err := strconv.Atoi(string(c.FirstKeptEntryIndex))
	if err != nil || k < 1 || k-1 > i {
		return nil
	}
	id, _ := json.Marshal(entries[k-1].ID)
	entries[i].raw, err = withMember(entries[i].raw, "firstKeptEntryId", id)
	return err
}

type parsed struct {
	entry *piEntry
	err   error
}

// parsePiLine decodes one line; nil means it was the header.
func parsePiLine(raw []byte, name string, line int, wantHeader bool, header *piHeader) *parsed {
	fail := func(field, format string, args ...any) *parsed {
		return &parsed{err: lineErr(name, line, field, format, args...)}
	}
	if !json.Valid(raw) || raw[0] != '{' {
		return fail("", "not a JSON object")
	}
	var e piEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		return fail(jsonField(err), "%v", err)
	}
	if wantHeader {
		if e.Type != "session" {
			return fail("type", `%q: the first line must be the {"type":"session"} header`, e.Type)
		}
		var h struct {
			ID      *string         `json:"id"`
			Version json.RawMessage `json:"version"`
		}
		if err := json.Unmarshal(raw, header); err != nil {
			return fail(jsonField(err), "%v", err)
		}
		_ = json.Unmarshal(raw, &h)
		if h.ID == nil {
			return fail("id", "missing: the header needs the session's id")
		}
		header.Version = 1
		if h.Version != nil && string(h.Version) != "null" {
			v, err := strconv.Atoi(string(h.Version))
			if err != nil || v < 1 {
				return fail("version", "%s: want a positive integer", h.Version)
			}
			header.Version = v
		}
		header.raw = append(json.RawMessage(nil), raw...)
		return nil
	}
	switch {
	case e.Type == "":
		return fail("type", "missing")
	case e.Type == "session":
		return fail("type", `a second {"type":"session"} header`)
	case e.Timestamp != "":
		if _, err := time.Parse(time.RFC3339Nano, e.Timestamp); err != nil {
			return fail("timestamp", "%q is not an RFC 3339 time", e.Timestamp)
		}
	}
	e.line, e.raw = line, append(json.RawMessage(nil), raw...)
	if e.Type == "message" && e.Message == nil {
		return fail("message", "missing")
	}
	return &parsed{entry: &e}
}

// jsonField names the member a decoding error is about.
func jsonField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return te.Field
	}
	return ""
}

// piPath returns the entries from the root to leaf.
func piPath(entries []*piEntry, name, leaf string) ([]*piEntry, error) {
	if len(entries) == 0 {
		if leaf != "" {
			return nil, fmt.Errorf("%s: --leaf %q: the file has no entries", name, leaf)
		}
		return nil, nil
	}
	byID := make(map[string]*piEntry, len(entries))
	for _, e := range entries {
		byID[e.ID] = e
	}
	cur := entries[len(entries)-1]
	if leaf != "" {
		if cur = byID[leaf]; cur == nil {
			return nil, fmt.Errorf("%s: --leaf %q: no entry with that id", name, leaf)
		}
	}
	var path []*piEntry
	for steps := 0; cur != nil; steps++ {
		if steps > len(entries) {
			return nil, lineErr(name, cur.line, "parentId", "the entries' parents form a cycle")
		}
		path = append(path, cur)
		if cur.ParentID == nil || *cur.ParentID == "" {
			break
		}
		parent := byID[*cur.ParentID]
		if parent == nil {
			return nil, lineErr(name, cur.line, "parentId", "no entry %q in the file", *cur.ParentID)
		}
		cur = parent
	}
	for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	return path, nil
}

// withMember returns the JSON object with member k set to v, as
// JavaScript's {...object, [k]: v} does: in the member's place if the
// object has it, else last. The other members are kept as they are, in
// their order.
func withMember(object json.RawMessage, k string, v json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(object))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	out := []byte{'{'}
	set := func(key, value []byte) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, key...), ':'), value...)
	}
	found := false
	for end := dec.InputOffset(); dec.More(); end = dec.InputOffset() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		// The key as written: what lies between the previous value and
		// the key's end, but for the comma and white space.
		key := bytes.TrimSpace(bytes.TrimLeft(bytes.TrimSpace(object[end:dec.InputOffset()]), ","))
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		if t == k {
			value, found = v, true
		}
		set(key, value)
	}
	if !found {
		name, _ := json.Marshal(k)
		set(name, v)
	}
	return append(out, '}'), nil
}

// withRole returns the entry with its message's role replaced.
func withRole(entry json.RawMessage, role string) (json.RawMessage, error) {
	var e struct {
		Message json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(entry, &e); err != nil {
		return nil, err
	}
	r, _ := json.Marshal(role)
	message, err := withMember(e.Message, "role", r)
	if err != nil {
		return nil, err
	}
	return withMember(entry, "message", message)
}
