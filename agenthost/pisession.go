package agenthost

import (
	"io"

	"github.com/turnlog/turnlog/internal/pisession"
)

// PiSessionVersion is the newest pi-coding-agent session file version
// ReadPiSession reads (pi-coding-agent 0.73.1 and 1.6 write version 3).
const PiSessionVersion = pisession.Version

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
//   - a session/start whose adapter is the model pi resumes the path with
//     (kind pi-ai), the header kept in its "piSession";
//   - each user message opens a turn (user/message); assistant messages
//     become assistant/message events carrying pi's message verbatim, its
//     inline thinkingSignature, textSignature and thoughtSignature included;
//     tool results become tool/result events, system messages
//     system/message events;
//   - compactions, context edits, extension and shell messages and branch
//     summaries become the context events replay applies as pi does;
//   - a turn ends (turn/end) before the next user message and at the end,
//     with the stop reason of its last assistant message, or aborted if it
//     has none;
//   - every other entry (model and thinking-level changes, labels, custom
//     entries) is kept as an event of type "pi/<entry type>" holding the
//     entry.
//
// docs/agent-hosts.md ("Importing pi-coding-agent sessions") has the whole
// table. Every event from an entry carries the entry's id and parentId in
// "piEntry". Versions 1 and 2 are migrated as pi-coding-agent migrates
// them. name names the file in errors, which give its line and field, e.g.
// `chat.jsonl: line 7: parentId: no entry "a1b2c3d4" in the file`.
func ReadPiSession(r io.Reader, name string, leaf string) (*PiSession, error) {
	p, err := pisession.Read(r, name, leaf)
	if err != nil {
		return nil, err
	}
	s := &PiSession{ID: p.ID, Cwd: p.Cwd, ParentSession: p.ParentSession, Version: p.Version, Leaf: p.Leaf,
		Events: make([]Event, len(p.Events)), Lines: p.Lines}
	for i, e := range p.Events {
		s.Events[i] = Event{typ: e.Type, data: e.JSON}
	}
	return s, nil
}

// WriteLog writes the session as a log file (JSON Lines with seqs), the
// input of `turnlog import`, `turnlog replay` and the other offline tools.
func (s *PiSession) WriteLog(w io.Writer) error {
	events := make([]pisession.Event, len(s.Events))
	for i, e := range s.Events {
		events[i] = pisession.Event{Type: e.typ, JSON: e.data}
	}
	return pisession.WriteLog(w, events)
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
