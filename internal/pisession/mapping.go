package pisession

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/turnlog/turnlog/internal/turnlog"
)

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
func (s *Session) convert(header piHeader, path []*piEntry, name string) error {
	c := &piConverter{s: s, name: name, path: path, reason: turnlog.StopReasonAborted, mapped: map[string]piMapped{}}
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
	s    *Session
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
	reason   turnlog.StopReason
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
	c.open, c.reason, c.response = true, turnlog.StopReasonAborted, 0
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
		contextMessage("bash", text(bashExecutionText(m)), messageTime(m, e.Timestamp))
		return ev, "fixed", nil
	case e.Type == "custom_message":
		contextMessage("extension:"+x.CustomType, textBlocks(x.Content), e.Timestamp)
	case e.Type == "branch_summary" && x.Summary != "":
		contextMessage("branchSummary", text(piBranchSummaryPrefix+x.Summary+piBranchSummarySuffix), e.Timestamp)
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
	c.reason = turnlog.StopReason(m.StopReason)
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
		text(piCompactionPrefix+x.Summary+piCompactionSuffix), firstKept
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
		var replacement any = x.Replacement
		if c.s.Events[target.seq].Type == string(turnlog.TypeContextMessage) {
			// An extension message's string content is sent as a text block.
			var r struct {
				Content json.RawMessage `json:"content"`
			}
			_ = json.Unmarshal(x.Replacement, &r)
			replacement = map[string]any{"content": textBlocks(r.Content)}
		}
		ev["type"], ev["targetSeq"], ev["replacement"] = turnlog.TypeContextEdit, target.seq, replacement
	}
}

// firstMessageFrom returns the seq of the first event from seq on, before
// limit, that carries a message; limit if none does. A pi compaction may
// keep from any entry; what turnlog keeps from is a message.
func (s *Session) firstMessageFrom(seq, limit int64) int64 {
	for ; seq < limit; seq++ {
		switch turnlog.EventType(s.Events[seq].Type) {
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
func resumeAdapter(path []*piEntry, msgs []piMessage, ctx []piContextEntry) turnlog.Adapter {
	a := turnlog.Adapter{Kind: turnlog.EnvelopeKindPiAI}
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

// textBlock is a pi-ai text block, its members in pi-ai's order.
type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// text is s as the content pi sends: one text block.
func text(s string) []textBlock { return []textBlock{{Type: "text", Text: s}} }

// textBlocks is content as pi sends an extension message's: a string
// becomes one text block, null no blocks.
func textBlocks(content json.RawMessage) any {
	switch {
	case content == nil || string(content) == "null":
		return []any{}
	case content[0] == '"':
		var s string
		_ = json.Unmarshal(content, &s)
		return text(s)
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

func validStop(r turnlog.StopReason) bool {
	switch r {
	case turnlog.StopReasonStop, turnlog.StopReasonLength, turnlog.StopReasonToolUse, turnlog.StopReasonError, turnlog.StopReasonAborted,
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
