package agenthost

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// PiSessionVersion is the newest pi-coding-agent session file version
// ReadPiSession reads (pi-coding-agent 0.73.1 writes version 3).
const PiSessionVersion = 3

// PiSession is a pi-coding-agent session file turned into a turn log.
type PiSession struct {
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

// ReadPiSession reads a pi-coding-agent session file (JSON Lines: a
// {"type":"session"} header, then entries linked by id and parentId into a
// tree) and returns the path from the root to leaf — the file's last entry
// when leaf is "", as pi-coding-agent resumes it — as a turn log:
//
//   - a session/start whose adapter is the first assistant message's api,
//     provider and model (kind pi-ai), the header kept in its "piSession";
//   - each user message opens a turn (user/message); assistant messages
//     become assistant/message events carrying pi's message verbatim, its
//     inline thinkingSignature, textSignature and thoughtSignature included;
//     tool results become tool/result events;
//   - a turn ends (turn/end) before the next user message and at the end,
//     with the stop reason of its last assistant message, or aborted if it
//     has none;
//   - every other entry (model and thinking-level changes, compactions,
//     branch summaries, labels, custom entries, messages of other roles) is
//     kept as an event of type "pi/<entry type>" holding the entry.
//
// Every event from an entry carries the entry's id and parentId in
// "piEntry". Versions 1 and 2 are migrated as pi-coding-agent migrates
// them: version 1 entries are chained in file order (with ids "v1-<line>")
// and a compaction's firstKeptEntryIndex becomes the firstKeptEntryId of
// the entry at that index, and version 2's hookMessage role becomes custom. name names the file in
// errors, which give its line and field, e.g.
// `chat.jsonl: line 7: parentId: no entry "a1b2c3d4" in the file`.
func ReadPiSession(r io.Reader, name string, leaf string) (*PiSession, error) {
	entries, header, err := readPiEntries(r, name)
	if err != nil {
		return nil, err
	}
	s := &PiSession{ID: header.ID, Cwd: header.Cwd, ParentSession: header.ParentSession, Version: header.Version}
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

// messageTime is the message's own timestamp (Unix milliseconds, as pi-ai
// stamps messages), which replay gives back to user messages and tool
// results; else the entry's.
func messageTime(m piMessage, entry string) string {
	ms, err := strconv.ParseInt(string(m.Timestamp), 10, 64)
	if err != nil {
		return entry
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

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
	if header.Version > PiSessionVersion {
		return nil, header, lineErr(name, headerLine, "version", "%d is newer than this reader (%d)", header.Version, PiSessionVersion)
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

// The texts pi-coding-agent 1.x wraps summaries in when it sends them
// (dist/core/messages.js).
const (
	piCompactionPrefix    = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
	piCompactionSuffix    = "\n</summary>"
	piBranchSummaryPrefix = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
	piBranchSummarySuffix = "</summary>"
)

// What an entry became in the log, for the compactions and context edits
// that name it.
type piMapped struct {
	seq int64
	// kind: "message" (user, assistant, tool result, extension message:
	// an edit may replace its content), "fixed" (a system message, shell
	// output, a branch summary, a compaction: an edit may only remove it),
	// or "" (no message).
	kind string
}

// convert builds the events of path.
func (s *PiSession) convert(header piHeader, path []*piEntry, name string) error {
	c := &piConverter{s: s, name: name, path: path, reason: StopReasonAborted, mapped: map[string]piMapped{}}
	if err := c.decode(header); err != nil {
		return err
	}
	s.add(0, map[string]any{"type": turnlog.TypeSessionStart, "adapter": resumeAdapter(path, c.msgs, c.ctx), "piSession": header.raw})
	last := ""
	for i, e := range path {
		ev, kind, err := c.entry(i)
		if err != nil {
			return err
		}
		if c.open {
			ev["turn"] = c.turn
		}
		if t, _ := ev["time"].(string); t == "" {
			delete(ev, "time")
		}
		c.mapped[e.ID] = piMapped{seq: int64(len(s.Events)), kind: kind}
		s.add(e.line, ev)
		if e.Timestamp != "" {
			last = e.Timestamp
		}
	}
	c.end(last)
	return s.check(name)
}

// piConverter is one conversion of a pi session's path into log events.
type piConverter struct {
	s    *PiSession
	name string
	path []*piEntry
	// msgs and ctx are the path's entries decoded: a message entry's
	// message, any other entry's fields.
	msgs []piMessage
	ctx  []piContextEntry
	// turn is the current turn, open whether it has not ended; response
	// counts its assistant messages and reason is how it ends so far.
	turn     int64
	response int
	open     bool
	reason   StopReason
	// mapped says which event each pi entry id became.
	mapped map[string]piMapped
}

// decode decodes the path's entries, migrating what pi migrates.
func (c *piConverter) decode(header piHeader) error {
	c.msgs = make([]piMessage, len(c.path))
	c.ctx = make([]piContextEntry, len(c.path))
	for i, e := range c.path {
		if e.Type != "message" {
			if err := json.Unmarshal(e.raw, &c.ctx[i]); err != nil {
				return lineErr(c.name, e.line, jsonField(err), "%v", err)
			}
			continue
		}
		if err := json.Unmarshal(e.Message, &c.msgs[i]); err != nil {
			return lineErr(c.name, e.line, "message."+jsonField(err), "%v", err)
		}
		if c.msgs[i].Role == "hookMessage" && header.Version < 3 {
			// pi-coding-agent's v2 → v3 migration.
			c.msgs[i].Role = "custom"
			var err error
			if e.raw, err = withRole(e.raw, "custom"); err != nil {
				return lineErr(c.name, e.line, "message", "%v", err)
			}
		}
	}
	return nil
}

// start opens a turn at e.
func (c *piConverter) start(e *piEntry) {
	c.turn++
	c.open, c.reason, c.response = true, StopReasonAborted, 0
	c.s.add(0, map[string]any{"type": turnlog.TypeTurnStart, "turn": c.turn, "time": e.Timestamp})
}

// end closes the open turn, if any, at time at.
func (c *piConverter) end(at string) {
	if c.open {
		c.s.add(0, map[string]any{"type": turnlog.TypeTurnEnd, "turn": c.turn, "time": at, "reason": c.reason})
		c.open = false
	}
}

// entry converts the path's entry i into an event, and says what kind of
// message it is to context edits: "message" (editable), "fixed" (only
// removable) or "" (none).
func (c *piConverter) entry(i int) (ev map[string]any, kind string, err error) {
	e, m, x := c.path[i], c.msgs[i], c.ctx[i]
	ev = map[string]any{"time": e.Timestamp, "piEntry": map[string]any{"id": e.ID, "parentId": e.ParentID}}
	contextMessage := func(origin string, content any, at string) {
		ev["type"], ev["origin"], ev["content"], ev["time"] = turnlog.TypeContextMessage, origin, content, at
	}
	switch {
	case e.Type == "message" && m.Role == "user":
		c.end(e.Timestamp)
		c.start(e)
		ev["type"], ev["content"], ev["time"] = turnlog.TypeUserMessage, orNull(m.Content), messageTime(m, e.Timestamp)
	case e.Type == "message" && m.Role == "assistant":
		return ev, "message", c.assistant(e, m, ev)
	case e.Type == "message" && m.Role == "toolResult":
		return ev, "message", c.toolResult(e, m, ev)
	case e.Type == "message" && m.Role == "system":
		content := m.Content
		if content == nil || string(content) == "null" {
			content = json.RawMessage(`""`) // as pi reads it
		}
		ev["type"], ev["content"], ev["time"] = turnlog.TypeSystemMessage, content, messageTime(m, e.Timestamp)
		copyMembers(ev, map[string]json.RawMessage{"sections": m.Sections, "toolsAdded": m.ToolsAdded, "toolsRemoved": m.ToolsRemoved})
		return ev, "fixed", nil
	case e.Type == "message" && m.Role == "custom":
		contextMessage("extension:"+m.CustomType, textBlocks(m.Content), messageTime(m, e.Timestamp))
	case e.Type == "message" && m.Role == "bashExecution" && !m.ExcludeFromContext:
		contextMessage("bash", []map[string]string{{"type": "text", "text": bashExecutionText(m)}}, messageTime(m, e.Timestamp))
		return ev, "fixed", nil
	case e.Type == "custom_message":
		contextMessage("extension:"+x.CustomType, textBlocks(x.Content), e.Timestamp)
	case e.Type == "branch_summary" && x.Summary != "":
		contextMessage("branchSummary", []map[string]string{{"type": "text", "text": piBranchSummaryPrefix + x.Summary + piBranchSummarySuffix}}, e.Timestamp)
		return ev, "fixed", nil
	case e.Type == "compaction":
		c.compaction(i, x, ev)
		return ev, "fixed", nil
	case e.Type == "context_edit":
		c.contextEdit(e, x, ev)
		return ev, "", nil
	default:
		keepEntry(e, ev)
		return ev, "", nil
	}
	return ev, "message", nil
}

// keepEntry makes ev an entry the log keeps and replay ignores.
func keepEntry(e *piEntry, ev map[string]any) {
	ev["type"], ev["entry"] = "pi/"+e.Type, e.raw
}

// copyMembers puts in ev the members that are there and not null.
func copyMembers(ev map[string]any, members map[string]json.RawMessage) {
	for k, v := range members {
		if v != nil && string(v) != "null" {
			ev[k] = v
		}
	}
}

func (c *piConverter) assistant(e *piEntry, m piMessage, ev map[string]any) error {
	if !c.open {
		c.start(e)
	}
	message := e.Message
	if m.Content == nil {
		// pi reads a message without content as one with none.
		var err error
		if message, err = withMember(message, "content", json.RawMessage("[]")); err != nil {
			return lineErr(c.name, e.line, "message", "%v", err)
		}
	}
	if err := checkAssistant(message); err != nil {
		return lineErr(c.name, e.line, "message", "%v", err)
	}
	ev["type"], ev["response"], ev["message"] = turnlog.TypeAssistantMessage, c.response, message
	c.response++
	c.reason = StopReason(m.StopReason)
	if !validStop(c.reason) {
		return lineErr(c.name, e.line, "message.stopReason", "%q is not a pi-ai stop reason", m.StopReason)
	}
	return nil
}

func (c *piConverter) toolResult(e *piEntry, m piMessage, ev map[string]any) error {
	if !c.open {
		c.start(e)
	}
	if m.ToolCallID == "" {
		return lineErr(c.name, e.line, "message.toolCallId", "missing")
	}
	ev["type"], ev["toolCallId"], ev["toolName"], ev["content"], ev["isError"] = turnlog.TypeToolResult, m.ToolCallID, m.ToolName, orNull(m.Content), m.IsError
	ev["time"] = messageTime(m, e.Timestamp)
	copyMembers(ev, map[string]json.RawMessage{"details": m.Details, "usage": m.Usage, "nestedCalls": m.NestedCalls, "durationMs": m.DurationMs})
	return nil
}

// compaction converts the path's compaction entry i: its kept tail starts
// at the first message from the entry it names.
func (c *piConverter) compaction(i int, x piContextEntry, ev map[string]any) {
	self := int64(len(c.s.Events))
	firstKept := self // an id not on the path keeps nothing, as in pi
	for _, kept := range c.path[:i] {
		if kept.ID == x.FirstKeptEntryID {
			firstKept = c.s.firstMessageFrom(c.mapped[kept.ID].seq, self)
		}
	}
	ev["type"], ev["content"], ev["firstKeptSeq"] = turnlog.TypeCompaction,
		[]map[string]string{{"type": "text", "text": piCompactionPrefix + x.Summary + piCompactionSuffix}}, firstKept
	if x.TokensBefore != nil {
		ev["tokensBefore"] = *x.TokensBefore
	}
	if x.SystemMessage != nil && string(x.SystemMessage) != "null" {
		ev["systemMessage"] = x.SystemMessage
	}
}

// contextEdit converts a context_edit entry; one pi ignores is kept as an
// entry replay ignores too.
func (c *piConverter) contextEdit(e *piEntry, x piContextEntry, ev map[string]any) {
	target, ok := c.mapped[x.TargetID]
	null := x.Replacement == nil || string(x.Replacement) == "null"
	switch {
	case !ok || target.kind == "" || (target.kind == "fixed" && !null):
		// pi-coding-agent changes nothing for it either.
		keepEntry(e, ev)
	case null:
		ev["type"], ev["targetSeq"], ev["replacement"] = turnlog.TypeContextEdit, target.seq, json.RawMessage("null")
	default:
		replacement := x.Replacement
		if c.s.Events[target.seq].typ == string(turnlog.TypeContextMessage) {
			// An extension message's string content is sent as a text block.
			var r struct {
				Content json.RawMessage `json:"content"`
			}
			_ = json.Unmarshal(replacement, &r)
			replacement, _ = json.Marshal(map[string]any{"content": textBlocks(r.Content)})
		}
		ev["type"], ev["targetSeq"], ev["replacement"] = turnlog.TypeContextEdit, target.seq, replacement
	}
}

// firstMessageFrom returns the seq of the first event from seq on, before
// limit, that carries a message; limit if none does. A pi compaction may
// keep from any entry; what turnlog keeps from is a message.
func (s *PiSession) firstMessageFrom(seq, limit int64) int64 {
	for ; seq < limit; seq++ {
		switch turnlog.EventType(s.Events[seq].typ) {
		case turnlog.TypeUserMessage, turnlog.TypeAssistantMessage, turnlog.TypeToolResult,
			turnlog.TypeSystemMessage, turnlog.TypeContextMessage, turnlog.TypeCompaction:
			return seq
		}
	}
	return limit
}

// resumeAdapter is the model pi-coding-agent resumes the path with: the
// last model change or assistant message on it. A model change names no
// api: it is the api of a message from that provider and model, if the
// file has one.
func resumeAdapter(path []*piEntry, msgs []piMessage, ctx []piContextEntry) Adapter {
	a := Adapter{Kind: turnlog.EnvelopeKindPiAI}
	for i, e := range path {
		switch {
		case e.Type == "model_change":
			a.API, a.Provider, a.Model = "", ctx[i].Provider, ctx[i].ModelID
		case e.Type == "message" && msgs[i].Role == "assistant":
			a.API, a.Provider, a.Model = msgs[i].API, msgs[i].Provider, msgs[i].Model
		}
	}
	if a.API == "" {
		for i := range path {
			if m := msgs[i]; m.Role == "assistant" && m.Provider == a.Provider && m.Model == a.Model && m.API != "" {
				a.API = m.API
			}
		}
	}
	if a.API == "" {
		a.API = piProviderAPI[a.Provider]
	}
	return a
}

// piProviderAPI is the api of the providers whose models all speak one in
// pi-ai 1.6.0's catalog; a model change to another provider's model that
// no message on the path came from leaves the Session's api empty.
var piProviderAPI = map[string]string{
	"amazon-bedrock": "bedrock-converse-stream", "anthropic": "anthropic-messages", "cerebras": "openai-completions",
	"deepseek": "openai-completions", "google": "google-generative-ai", "google-vertex": "google-vertex",
	"groq": "openai-completions", "huggingface": "openai-completions", "minimax": "anthropic-messages",
	"mistral": "mistral-conversations", "moonshotai": "openai-completions", "nvidia": "openai-completions",
	"openai": "openai-responses", "openai-codex": "openai-codex-responses", "together": "openai-completions",
	"xai": "openai-responses", "zai": "openai-completions",
}

// textBlocks is content as pi sends an extension message's: a string
// becomes one text block, null no blocks.
func textBlocks(content json.RawMessage) any {
	switch {
	case content == nil || string(content) == "null":
		return []any{}
	case content[0] == '"':
		var text string
		_ = json.Unmarshal(content, &text)
		return []map[string]string{{"type": "text", "text": text}}
	}
	return content
}

func orNull(content json.RawMessage) json.RawMessage {
	if content == nil {
		return json.RawMessage("null")
	}
	return content
}

// bashExecutionText is pi-coding-agent's bashExecutionToText: a shell
// command run with !cmd, as the model is told of it.
func bashExecutionText(m piMessage) string {
	text := "Ran `" + m.Command + "`\n"
	if m.Output != "" {
		text += "```\n" + m.Output + "\n```"
	} else {
		text += "(no output)"
	}
	exit := string(m.ExitCode)
	switch {
	case m.Cancelled:
		text += "\n\n(command cancelled)"
	case exit != "" && exit != "null" && exit != "0":
		text += "\n\nCommand exited with code " + exit
	}
	if m.Truncated && m.FullOutputPath != "" {
		text += "\n\n[Output truncated. Full output: " + m.FullOutputPath + "]"
	}
	return text
}

// withMember returns the JSON object with member k set to v.
func withMember(object json.RawMessage, k string, v json.RawMessage) (json.RawMessage, error) {
	var o map[string]json.RawMessage
	if err := json.Unmarshal(object, &o); err != nil {
		return nil, err
	}
	o[k] = v
	return json.Marshal(o)
}

// withRole returns the entry with its message's role replaced.
func withRole(entry json.RawMessage, role string) (json.RawMessage, error) {
	var e map[string]json.RawMessage
	if err := json.Unmarshal(entry, &e); err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(e["message"], &m); err != nil {
		return nil, err
	}
	m["role"], _ = json.Marshal(role)
	e["message"], _ = json.Marshal(m)
	return json.Marshal(e)
}

func validStop(r StopReason) bool {
	switch r {
	case StopReasonStop, StopReasonLength, StopReasonToolUse, StopReasonError, StopReasonAborted,
		turnlog.StopReasonPending, turnlog.StopReasonDeferred:
		return true
	}
	return false
}

// checkAssistant checks that pi's message has the shape turnlog reads.
func checkAssistant(raw json.RawMessage) error {
	var m turnlog.AssistantMessage
	return json.Unmarshal(raw, &m)
}

func (s *PiSession) add(line int, v map[string]any) {
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
		panic(fmt.Sprintf("agenthost: encode %s event: %v", typ, err))
	}
	s.Events = append(s.Events, Event{typ: string(typ), data: data})
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
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return err
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
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

// check runs the log through turnlog's structure check, naming the file
// line an event came from.
func (s *PiSession) check(name string) error {
	v := turnlog.NewValidator()
	for i, ev := range s.Events {
		line := withSeq(ev.data, int64(i))
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

// WriteLog writes the session as a log file (JSON Lines with seqs), the
// input of `turnlog import`, `turnlog replay` and the other offline tools.
func (s *PiSession) WriteLog(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for i, ev := range s.Events {
		bw.Write(withSeq(ev.data, int64(i)))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// Annotations `turnlog import --format pi-session` sets on the Session, so
// a resumed or forked pi session can be traced to the file it came from.
const (
	// AnnotationPiSession is the pi session's id (its header's id).
	AnnotationPiSession = "turnlog.dev/pi-session"
	// AnnotationPiParentSession is the header's parentSession: the session
	// file a branched or forked pi session was made from.
	AnnotationPiParentSession = "turnlog.dev/pi-parent-session"
)

// Annotations returns the annotations that record where the session came
// from.
func (s *PiSession) Annotations() map[string]string {
	a := map[string]string{AnnotationPiSession: s.ID}
	if s.ParentSession != "" {
		a[AnnotationPiParentSession] = s.ParentSession
	}
	return a
}
