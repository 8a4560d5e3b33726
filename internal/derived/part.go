package derived

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"

	gojson "github.com/goccy/go-json"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/sessionlog"
)

// A stored transcript is a chain of parts, each holding a run of
// consecutive messages. A part is JSON Lines: a header line that lists its
// messages' fields and byte lengths, then each message's JSON on a line of
// its own, as json.Marshal wrote it. The checkpoint lists each part with
// the CRC-32C of its bytes, so a reader checks that a part is the one the
// run wrote (at memory speed) and then hands the message lines out as they
// are, without decoding or re-parsing them: reading a stored transcript
// costs its bytes and its header, not a JSON decode of every message
// (docs/benchmarks.md, "Agent hosts"). The CRC protects against objects
// damaged, truncated or left from another run; whoever can write the
// bucket can also write the checkpoint, and derived data cannot be made
// proof against them (docs/security.md).

// MaxPartBytes caps the messages of one part: a run splits a bigger
// transcript into several parts, and merging stops at it. Parts of a MiB
// keep every part far under sessionlog's cap on a derived object, let a
// reader fetch a big transcript several parts at once, and bound what a
// fork's child copies of its source's transcript: the parts after the
// last sealed one, which are at most about MaxPartBytes (SeedFork).
const MaxPartBytes = 1 << 20

// maxMessageLine is the largest message a part may hold: what a reader
// accepts of a derived object, less room for the part's header.
const maxMessageLine = sessionlog.MaxDerivedBytes - 1<<20

// maxParts caps how many parts a checkpoint lists, which keeps it under
// the 64 KiB a checkpoint may have. Merging leaves parts of more than half
// of MaxPartBytes (two that fit together are merged) plus log2 of the
// rest, so this bounds a stored transcript to 0.4-0.8 GB, far beyond what
// a model takes as context. A run that would list more fails, naming the
// bound.
const maxParts = 800

// PartRef is a stored part as the replay checkpoint lists it.
type PartRef struct {
	// Start is the index of the part's first message in the transcript.
	Start int64 `json:"start"`
	// Count is how many messages it holds.
	Count int64 `json:"count"`
	// Bytes is the size of its messages, which decides merging.
	Bytes int64 `json:"bytes"`
	// CRC32C is the CRC-32C (Castagnoli) of the whole stored object.
	CRC32C uint32 `json:"crc32c"`
	// Epoch is the ReplayState.Epoch the part was written in: 0 until a
	// compaction or an edit rewrote the transcript, so that a rewritten
	// part never takes the name of one a fork's child may still read.
	Epoch int64 `json:"epoch,omitempty"`
	// Session and UID name the Session whose derived data holds the part,
	// in the log's namespace, when that is not the log's own: a part a
	// fork's child shares with its source (SeedFork). Such a part is
	// final, never merged again, and its holder deletes it only with its
	// Session, when no child's pin keeps it.
	Session string `json:"session,omitempty"`
	UID     string `json:"uid,omitempty"`
}

// shared reports whether the part is another Session's.
func (r PartRef) shared() bool { return r.Session != "" || r.UID != "" }

// id tells the part apart from every other of any Session's transcript
// for the same target.
func (r PartRef) id(dir string) string { return r.Session + "/" + r.UID + "/" + r.Name(dir) }

// holder is the log whose derived data holds the part.
func (r PartRef) holder(log Log) (Log, error) {
	if !r.shared() {
		return log, nil
	}
	h, err := log.Beside(r.Session, r.UID)
	if err != nil {
		return nil, fmt.Errorf("%w: transcript part %s of Session %q (uid %q): %w", ErrUnusable, r.Name(""), r.Session, r.UID, err)
	}
	return h, nil
}

// sealed reports whether the part can never be merged again: two parts
// merge only when the first is no bigger than the second and both fit in
// MaxPartBytes, which a part of more than half of it never does. Every
// part before a sealed one is final too: the merges that extendParts
// makes at the tail never reach past a sealed part.
func (r PartRef) sealed() bool { return 2*r.Bytes > MaxPartBytes }

// Name is the part's object name: its message range, so a merged part
// never overwrites one that a reader holding an older checkpoint may still
// be reading.
func (r PartRef) Name(dir string) string {
	if r.Epoch != 0 {
		return fmt.Sprintf("%s/%020d-%020d.e%d.jsonl", dir, r.Start, r.Start+r.Count, r.Epoch)
	}
	return fmt.Sprintf("%s/%020d-%020d.jsonl", dir, r.Start, r.Start+r.Count)
}

// finalParts is how many of refs' first parts are final: through the
// last sealed one.
func finalParts(refs []PartRef) int {
	for i := len(refs) - 1; i >= 0; i-- {
		if refs[i].sealed() {
			return i + 1
		}
	}
	return 0
}

// checkParts reports whether refs can be a transcript's chain of parts:
// starting at message 0, each starting where the previous one ends.
func checkParts(refs []PartRef) error {
	if len(refs) > maxParts {
		return fmt.Errorf("%d transcript parts listed, more than the %d a run leaves", len(refs), maxParts)
	}
	next := int64(0)
	for i, r := range refs {
		if r.Start != next || r.Count <= 0 || r.Bytes < r.Count {
			return fmt.Errorf("transcript part %d (start %d, count %d, bytes %d) does not follow the one before it, which ends at message %d", i, r.Start, r.Count, r.Bytes, next)
		}
		if r.Epoch < 0 {
			return fmt.Errorf("transcript part %d has epoch %d", i, r.Epoch)
		}
		if (r.Session == "") != (r.UID == "") {
			return fmt.Errorf("transcript part %d names Session %q with uid %q: both or neither", i, r.Session, r.UID)
		}
		next = r.Start + r.Count
	}
	return nil
}

// partHeader is a part's first line: its messages' fields and the byte
// length of each message's line, by column (which decodes faster than an
// object per message), and the diagnostics of its degraded messages.
type partHeader struct {
	Start     int64         `json:"start"`
	Seqs      []int64       `json:"seqs"`
	Roles     []string      `json:"roles"`
	Replay    []replay.Mode `json:"replay"`
	Synthetic []bool        `json:"synthetic"`
	// Origins is absent from parts that no message with an origin was ever
	// in (every part written before there were context events).
	Origins []string `json:"origins,omitempty"`
	// Dropped lists each message's replay.Message.DroppedBlocks; absent
	// from parts no such message was ever in.
	Dropped     [][]int             `json:"dropped,omitempty"`
	Bytes       []int               `json:"bytes"`
	Diagnostics []replay.Diagnostic `json:"diagnostics"`
}

func newHeader(start int64) partHeader {
	return partHeader{Start: start, Seqs: []int64{}, Roles: []string{}, Replay: []replay.Mode{}, Synthetic: []bool{}, Bytes: []int{}, Diagnostics: []replay.Diagnostic{}}
}

// origin is the i-th message's origin.
func (h *partHeader) origin(i int) string {
	if h.Origins == nil {
		return ""
	}
	return h.Origins[i]
}

// dropped is the i-th message's dropped blocks.
func (h *partHeader) dropped(i int) []int {
	if h.Dropped == nil {
		return nil
	}
	return h.Dropped[i]
}

// droppedColumn is the Dropped column, n messages long when one is needed.
func droppedColumn(h *partHeader) [][]int {
	if h.Dropped == nil {
		return make([][]int, h.count())
	}
	return h.Dropped
}

// origins is the Origins column, n messages long when one is needed.
func origins(h *partHeader) []string {
	if h.Origins == nil {
		return make([]string, h.count())
	}
	return h.Origins
}

func (h *partHeader) count() int { return len(h.Seqs) }

// add lists a message whose line is n bytes.
func (h *partHeader) add(m replay.Message, n int) {
	h.Seqs = append(h.Seqs, m.Seq)
	h.Roles = append(h.Roles, m.Role)
	h.Replay = append(h.Replay, m.Replay)
	h.Synthetic = append(h.Synthetic, m.Synthetic)
	h.Bytes = append(h.Bytes, n)
	if m.Origin != "" && h.Origins == nil {
		h.Origins = make([]string, h.count()-1, h.count())
	}
	if h.Origins != nil {
		h.Origins = append(h.Origins, m.Origin)
	}
	if len(m.DroppedBlocks) > 0 && h.Dropped == nil {
		h.Dropped = make([][]int, h.count()-1, h.count())
	}
	if h.Dropped != nil {
		h.Dropped = append(h.Dropped, m.DroppedBlocks)
	}
}

// columnsAgree reports whether every column lists every message.
func (h *partHeader) columnsAgree() bool {
	n := h.count()
	return len(h.Roles) == n && len(h.Replay) == n && len(h.Synthetic) == n && len(h.Bytes) == n &&
		(h.Origins == nil || len(h.Origins) == n) && (h.Dropped == nil || len(h.Dropped) == n)
}

// part is a part in memory: its header and its message lines.
type part struct {
	header partHeader
	// body is each message's JSON followed by '\n'.
	body []byte
}

func (p *part) ref() PartRef {
	return PartRef{Start: p.header.Start, Count: int64(p.header.count()), Bytes: int64(len(p.body))}
}

// newParts cuts a run's messages, the transcript's from message start on,
// into parts of at most MaxPartBytes of messages each (a bigger message
// gets a part of its own). Each diagnostic goes with the part holding the
// message it is about; the order of both lists is kept.
func newParts(start int64, msgs []replay.Message, diags []replay.Diagnostic) ([]*part, error) {
	var parts []*part
	cur := &part{header: newHeader(start)}
	for i, m := range msgs {
		// Marshal compacts the message, so it holds no newline: one line.
		line, err := json.Marshal(m.Message)
		if err != nil {
			return nil, fmt.Errorf("encode the message at seq %d: %w", m.Seq, err)
		}
		if len(line) > maxMessageLine {
			// A part the reader refuses must never be written, and a
			// transcript without it must never be called current: the run
			// fails, and says why.
			return nil, fmt.Errorf("the message at seq %d is %d bytes as JSON, more than the %d a transcript part may hold", m.Seq, len(line), maxMessageLine)
		}
		if cur.header.count() > 0 && len(cur.body)+len(line)+1 > MaxPartBytes {
			parts = append(parts, cur)
			cur = &part{header: newHeader(start + int64(i))}
		}
		cur.header.add(m, len(line))
		cur.body = append(append(cur.body, line...), '\n')
	}
	if cur.header.count() > 0 {
		parts = append(parts, cur)
	}
	if len(parts) == 0 {
		return nil, nil
	}
	// Diagnostics in order, each part taking those up to its last message.
	d := 0
	for i, p := range parts {
		last := p.header.Seqs[p.header.count()-1]
		for d < len(diags) && (diags[d].Seq <= last || i == len(parts)-1) {
			p.header.Diagnostics = append(p.header.Diagnostics, diags[d])
			d++
		}
	}
	return parts, nil
}

// merge returns a part holding a's messages then b's.
func merge(a, b *part) *part {
	x, y := &a.header, &b.header
	var originsColumn []string
	if x.Origins != nil || y.Origins != nil {
		originsColumn = slices.Concat(origins(x), origins(y))
	}
	var dropped [][]int
	if x.Dropped != nil || y.Dropped != nil {
		dropped = slices.Concat(droppedColumn(x), droppedColumn(y))
	}
	return &part{
		header: partHeader{
			Start:       x.Start,
			Seqs:        slices.Concat(x.Seqs, y.Seqs),
			Roles:       slices.Concat(x.Roles, y.Roles),
			Replay:      slices.Concat(x.Replay, y.Replay),
			Synthetic:   slices.Concat(x.Synthetic, y.Synthetic),
			Origins:     originsColumn,
			Dropped:     dropped,
			Bytes:       slices.Concat(x.Bytes, y.Bytes),
			Diagnostics: slices.Concat(x.Diagnostics, y.Diagnostics),
		},
		body: slices.Concat(a.body, b.body),
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encode returns the part's object.
func (p *part) encode() ([]byte, error) {
	header, err := json.Marshal(p.header)
	if err != nil {
		return nil, fmt.Errorf("encode a transcript part: %w", err)
	}
	return append(append(append(make([]byte, 0, len(header)+1+len(p.body)), header...), '\n'), p.body...), nil
}

// decodePart reads a stored part, checking it is the part ref lists: its
// CRC-32C, its header, and each message's length ending at a line's end.
// It names the line of what is wrong. The messages are not decoded:
// appendMessages hands out their bytes.
func decodePart(data []byte, ref PartRef) (*part, error) {
	if sum := crc32.Checksum(data, castagnoli); sum != ref.CRC32C {
		return nil, fmt.Errorf("the object's CRC-32C is %08x, the checkpoint lists %08x: not the part the replay run wrote", sum, ref.CRC32C)
	}
	headerLine, body, ok := bytes.Cut(data, []byte{'\n'})
	if !ok {
		return nil, errors.New("line 1: no header line")
	}
	p := &part{body: body}
	if err := gojson.Unmarshal(headerLine, &p.header); err != nil {
		return nil, fmt.Errorf("line 1: %w", err)
	}
	h := &p.header
	if !h.columnsAgree() {
		return nil, fmt.Errorf("line 1: the header lists %d seqs, %d roles, %d replay modes, %d synthetic flags, %d origins, %d dropped-block lists and %d lengths", len(h.Seqs), len(h.Roles), len(h.Replay), len(h.Synthetic), len(h.Origins), len(h.Dropped), len(h.Bytes))
	}
	if h.Start != ref.Start || int64(h.count()) != ref.Count || int64(len(body)) != ref.Bytes {
		return nil, fmt.Errorf("line 1: the part holds %d messages (%d bytes) from message %d; the checkpoint lists %d (%d bytes) from %d",
			h.count(), len(body), h.Start, ref.Count, ref.Bytes, ref.Start)
	}
	off := 0
	for i, n := range h.Bytes {
		// Compared before adding, as a forged length could overflow.
		if n <= 0 || n >= len(body)-off || body[off+n] != '\n' {
			return nil, fmt.Errorf("line %d: the header gives the message at seq %d %d bytes, which do not end at a line's end", i+2, h.Seqs[i], n)
		}
		off += n + 1
	}
	if off != len(body) {
		return nil, fmt.Errorf("line %d: more lines than the header lists", h.count()+2)
	}
	return p, nil
}

// appendMessages appends the part's messages to out. The messages share
// the part's bytes.
func (p *part) appendMessages(out []replay.Message) []replay.Message {
	h, off := &p.header, 0
	for i, n := range h.Bytes {
		out = append(out, replay.Message{Seq: h.Seqs[i], Role: h.Roles[i], Replay: h.Replay[i], Synthetic: h.Synthetic[i],
			Origin: h.origin(i), DroppedBlocks: h.dropped(i), Message: json.RawMessage(p.body[off : off+n : off+n])})
		off += n + 1
	}
	return out
}

// ErrPartsLost: a part the checkpoint lists is gone or is not that part.
var ErrPartsLost = errors.New("a stored transcript part is lost")

// link is a part of the transcript's chain: a stored one (part nil) or one
// this run made, which is to be written.
type link struct {
	ref  PartRef
	part *part
}

// extendParts appends a run's messages to the chain of stored parts and
// merges the tail as long as a part is no bigger than the one after it
// (and the two fit in one part). Like a binary counter, that keeps a
// Session replayed turn by turn to a few parts — about log2 of its
// messages — and rewrites each message about log2 times in all, so a host
// reading the transcript makes a handful of requests however often the
// workers ran.
func extendParts(ctx context.Context, log Log, dir string, stored []PartRef, msgs []replay.Message, diags []replay.Diagnostic) ([]link, error) {
	chain := make([]link, 0, len(stored)+1)
	start := int64(0)
	for _, r := range stored {
		chain = append(chain, link{ref: r})
		start = r.Start + r.Count
	}
	fresh, err := newParts(start, msgs, diags)
	if err != nil {
		return nil, err
	}
	for _, p := range fresh {
		chain = append(chain, link{ref: p.ref(), part: p})
	}
	if len(fresh) == 0 {
		return chain, nil
	}
	for n := len(chain); n >= 2; n = len(chain) {
		x, y := chain[n-2], chain[n-1]
		if x.ref.Bytes > y.ref.Bytes || x.ref.Bytes+y.ref.Bytes > MaxPartBytes {
			break
		}
		if x.ref.shared() || y.ref.shared() {
			break // final: the source never merges it either
		}
		if x.part == nil {
			name := x.ref.Name(dir)
			data, err := log.GetDerived(ctx, name, 0)
			if err != nil {
				if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnusable) {
					return nil, fmt.Errorf("%w: %w", ErrPartsLost, err)
				}
				return nil, fmt.Errorf("read %s: %w", name, err)
			}
			if x.part, err = decodePart(data, x.ref); err != nil {
				return nil, fmt.Errorf("%w: read %s: %w", ErrPartsLost, name, err)
			}
		}
		m := merge(x.part, y.part)
		chain = append(chain[:n-2], link{ref: m.ref(), part: m})
	}
	if len(chain) > maxParts {
		last := chain[len(chain)-1].ref
		return nil, fmt.Errorf("the transcript would have %d messages in %d parts of up to %d bytes: more than the %d parts a stored transcript may have", last.Start+last.Count, len(chain), MaxPartBytes, maxParts)
	}
	return chain, nil
}

// deleteUnlisted deletes the log's own parts that the previous checkpoint
// listed and the new one does not; another Session's are its own to
// delete. A final part goes only when no fork's child may share it: a
// transcript rewritten (a compaction, an edit) drops its final parts, and
// a Session that children refer to keeps them until it is deleted. A part
// that cannot be deleted is left: nothing reads an unlisted part, and
// deleting the Session removes it.
func deleteUnlisted(ctx context.Context, log Log, dir string, before, after []PartRef) {
	listed := make(map[string]bool, len(after))
	for _, r := range after {
		listed[r.id(dir)] = true
	}
	final := finalParts(before)
	keepFinal := sync.OnceValue(func() bool { return isReferred(ctx, log) }) // asked at most once
	for i, r := range before {
		if r.shared() || listed[r.id(dir)] || i < final && keepFinal() {
			continue
		}
		_ = log.DeleteDerived(ctx, r.Name(dir))
	}
}

// ReferredLog is a Log that can tell whether forks' children refer to it.
type ReferredLog interface {
	// Referred reports whether any fork's child may share its data.
	Referred(ctx context.Context) (bool, error)
}

// isReferred: a log that fails to tell is taken as referred to, which
// costs at most the parts it keeps until its Session is deleted; one that
// cannot tell has no other Session beside it (Log.Beside).
func isReferred(ctx context.Context, log Log) bool {
	r, ok := log.(ReferredLog)
	if !ok {
		return false
	}
	referred, err := r.Referred(ctx)
	return referred || err != nil
}

// AppendParts stores msgs, with the diagnostics diags of their messages,
// as the transcript after the parts the state lists (none: a new
// transcript), merging the last parts as extendParts does, and has the
// state list the parts. The stored checkpoint lists them from Commit on.
func (c *ReplayCheckpoint) AppendParts(ctx context.Context, msgs []replay.Message, diags []replay.Diagnostic) error {
	chain, err := extendParts(ctx, c.log, c.dir, c.State.Parts, msgs, diags)
	if err != nil {
		return err
	}
	refs := make([]PartRef, 0, len(chain))
	for _, l := range chain {
		if l.part != nil {
			l.ref.Epoch = c.State.Epoch
			data, err := l.part.encode()
			if err != nil {
				return err
			}
			l.ref.CRC32C = crc32.Checksum(data, castagnoli)
			if err := c.log.PutDerived(ctx, l.ref.Name(c.dir), data); err != nil {
				return fmt.Errorf("write %s: %w", l.ref.Name(c.dir), err)
			}
		}
		refs = append(refs, l.ref)
	}
	c.State.Parts = refs
	return nil
}

// MessageCount is how many messages the parts hold.
func MessageCount(parts []PartRef) int64 {
	if len(parts) == 0 {
		return 0
	}
	last := parts[len(parts)-1]
	return last.Start + last.Count
}
