package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	gojson "github.com/goccy/go-json"

	"github.com/turnlog/turnlog/internal/replay"
)

// A stored transcript is a chain of parts, each holding a run of
// consecutive messages. A part is JSON Lines: a header line that lists its
// messages' fields and byte lengths, then each message's JSON on a line of
// its own. Reading one therefore decodes only the small header; the
// messages are checked to be JSON and handed out as they are, not decoded,
// which is what makes reading a stored transcript much cheaper than
// replaying the log (docs/benchmarks.md, "Agent hosts").

// maxPartBytes caps the messages of one part: a run splits a bigger
// transcript into several parts, and merging stops at it. Parts of a few
// MiB keep every part far under sessionlog's cap on a derived object and
// let a reader fetch a big transcript several parts at once.
const maxPartBytes = 2 << 20

// maxParts caps how many parts a checkpoint lists, which keeps it under
// the 64 KiB a checkpoint may have: merging keeps a transcript to about
// one part per maxPartBytes plus log2 of the rest, so this bounds a
// stored transcript to about 1.6 GB, far beyond what a model takes as
// context. A run that would list more fails, naming the bound.
const maxParts = 800

// partRef is a stored part as the replay checkpoint lists it.
type partRef struct {
	// Start is the index of the part's first message in the transcript.
	Start int64 `json:"start"`
	// Count is how many messages it holds.
	Count int64 `json:"count"`
	// Bytes is the size of its messages, which decides merging.
	Bytes int64 `json:"bytes"`
}

// name is the part's object name: its message range, so a merged part
// never overwrites one that a reader holding an older checkpoint may still
// be reading.
func (r partRef) name(dir string) string {
	return fmt.Sprintf("%s/%020d-%020d.jsonl", dir, r.Start, r.Start+r.Count)
}

// checkParts reports whether refs can be a transcript's chain of parts:
// starting at message 0, each starting where the previous one ends.
func checkParts(refs []partRef) error {
	if len(refs) > maxParts {
		return fmt.Errorf("%d transcript parts listed, more than the %d a run leaves", len(refs), maxParts)
	}
	next := int64(0)
	for i, r := range refs {
		if r.Start != next || r.Count <= 0 || r.Bytes < r.Count {
			return fmt.Errorf("transcript part %d (start %d, count %d, bytes %d) does not follow the one before it, which ends at message %d", i, r.Start, r.Count, r.Bytes, next)
		}
		next = r.Start + r.Count
	}
	return nil
}

// partHeader is a part's first line.
type partHeader struct {
	Start    int64         `json:"start"`
	Messages []messageMeta `json:"messages"`
	// Diagnostics are those of the part's degraded messages.
	Diagnostics []replay.Diagnostic `json:"diagnostics"`
}

// messageMeta is a replay.Message without its message, and the length of
// the message's line.
type messageMeta struct {
	Seq       int64       `json:"seq"`
	Role      string      `json:"role"`
	Replay    replay.Mode `json:"replay,omitempty"`
	Synthetic bool        `json:"synthetic,omitempty"`
	Bytes     int         `json:"bytes"`
}

// part is a part in memory: its header and its message lines.
type part struct {
	header partHeader
	// body is each message's JSON followed by '\n'.
	body []byte
}

func (p *part) ref() partRef {
	return partRef{Start: p.header.Start, Count: int64(len(p.header.Messages)), Bytes: int64(len(p.body))}
}

// newParts cuts a run's messages, the transcript's from message start on,
// into parts of at most maxPartBytes of messages each (a bigger message
// gets a part of its own). Each diagnostic goes with the part holding the
// message it is about; the order of both lists is kept.
func newParts(start int64, msgs []replay.Message, diags []replay.Diagnostic) ([]*part, error) {
	var parts []*part
	cur := &part{header: partHeader{Start: start, Messages: []messageMeta{}, Diagnostics: []replay.Diagnostic{}}}
	for i, m := range msgs {
		// Marshal compacts the message, so it holds no newline: one line.
		line, err := json.Marshal(m.Message)
		if err != nil {
			return nil, fmt.Errorf("encode the message at seq %d: %w", m.Seq, err)
		}
		if len(cur.header.Messages) > 0 && len(cur.body)+len(line)+1 > maxPartBytes {
			parts = append(parts, cur)
			cur = &part{header: partHeader{Start: start + int64(i), Messages: []messageMeta{}, Diagnostics: []replay.Diagnostic{}}}
		}
		cur.header.Messages = append(cur.header.Messages, messageMeta{Seq: m.Seq, Role: m.Role, Replay: m.Replay, Synthetic: m.Synthetic, Bytes: len(line)})
		cur.body = append(append(cur.body, line...), '\n')
	}
	if len(cur.header.Messages) > 0 {
		parts = append(parts, cur)
	}
	if len(parts) == 0 {
		return nil, nil
	}
	// Diagnostics in order, each part taking those up to its last message.
	d := 0
	for i, p := range parts {
		last := p.header.Messages[len(p.header.Messages)-1].Seq
		for d < len(diags) && (diags[d].Seq <= last || i == len(parts)-1) {
			p.header.Diagnostics = append(p.header.Diagnostics, diags[d])
			d++
		}
	}
	return parts, nil
}

// merge returns a part holding a's messages then b's.
func merge(a, b *part) *part {
	return &part{
		header: partHeader{
			Start:       a.header.Start,
			Messages:    append(append(make([]messageMeta, 0, len(a.header.Messages)+len(b.header.Messages)), a.header.Messages...), b.header.Messages...),
			Diagnostics: append(append(make([]replay.Diagnostic, 0, len(a.header.Diagnostics)+len(b.header.Diagnostics)), a.header.Diagnostics...), b.header.Diagnostics...),
		},
		body: append(append(make([]byte, 0, len(a.body)+len(b.body)), a.body...), b.body...),
	}
}

// encode returns the part's object.
func (p *part) encode() ([]byte, error) {
	header, err := json.Marshal(p.header)
	if err != nil {
		return nil, fmt.Errorf("encode a transcript part: %w", err)
	}
	return append(append(append(make([]byte, 0, len(header)+1+len(p.body)), header...), '\n'), p.body...), nil
}

// decodePart reads a stored part, checking it is the part ref lists and
// that each message line is one JSON value. It names the line of what is
// wrong. The messages are not decoded: messages() hands out
// their bytes.
func decodePart(data []byte, ref partRef) (*part, error) {
	headerLine, body, ok := bytes.Cut(data, []byte{'\n'})
	if !ok {
		return nil, errors.New("line 1: no header line")
	}
	p := &part{body: body}
	if err := gojson.Unmarshal(headerLine, &p.header); err != nil {
		return nil, fmt.Errorf("line 1: %w", err)
	}
	if p.header.Start != ref.Start || int64(len(p.header.Messages)) != ref.Count || int64(len(body)) != ref.Bytes {
		return nil, fmt.Errorf("line 1: the part holds %d messages (%d bytes) from message %d; the checkpoint lists %d (%d bytes) from %d",
			len(p.header.Messages), len(body), p.header.Start, ref.Count, ref.Bytes, ref.Start)
	}
	off := 0
	for i, m := range p.header.Messages {
		// Compared before adding, as a forged length could overflow.
		if m.Bytes <= 0 || m.Bytes >= len(body)-off || body[off+m.Bytes] != '\n' {
			return nil, fmt.Errorf("line %d: the header gives the message at seq %d %d bytes, which do not end at a line's end", i+2, m.Seq, m.Bytes)
		}
		end := off + m.Bytes
		if !gojson.Valid(body[off:end]) {
			return nil, fmt.Errorf("line %d: the message at seq %d is not JSON", i+2, m.Seq)
		}
		off = end + 1
	}
	if off != len(body) {
		return nil, fmt.Errorf("line %d: more lines than the header lists", len(p.header.Messages)+2)
	}
	return p, nil
}

// appendMessages appends the part's messages to out. The messages share
// the part's bytes.
func (p *part) appendMessages(out []replay.Message) []replay.Message {
	off := 0
	for _, m := range p.header.Messages {
		out = append(out, replay.Message{Seq: m.Seq, Role: m.Role, Replay: m.Replay, Synthetic: m.Synthetic,
			Message: json.RawMessage(p.body[off : off+m.Bytes : off+m.Bytes])})
		off += m.Bytes + 1
	}
	return out
}
