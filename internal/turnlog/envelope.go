package turnlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// EnvelopeKindPiAI is the kind of envelope pi-ai adapters write.
const EnvelopeKindPiAI = "pi-ai"

// ReplayEnvelope is the typed replay state of a response:
//
//	{"kind": "pi-ai", "version": 2,
//	 "response": {…opaque…},
//	 "blocks":   [{"type": <block type>, …opaque…} | null, …]}
//
// Blocks, when present, is aligned index for index with the blocks the
// stream emitted; each entry names the block type it belongs to so a reader
// can check the shape before trusting it.
type ReplayEnvelope struct {
	// Kind is empty and Version 0 when the member is absent, as in the legacy
	// flat version-1 form.
	Kind     string
	Version  int64
	Response json.RawMessage
	// Blocks holds the per-block entries when HasBlocks.
	Blocks    []BlockEntry
	HasBlocks bool

	// raw is the envelope as written: pruning entries re-encodes it member by
	// member, leaving every other member as the adapter wrote it.
	raw json.RawMessage
}

type member struct {
	key   string
	value json.RawMessage
}

// BlockEntry is one entry of ReplayEnvelope.Blocks: null (no metadata for the
// block) or an object naming the block type, usually with a signature.
type BlockEntry struct {
	// Type is the block type the entry belongs to; empty for a null entry.
	Type string
	// Signature is the opaque provider signature pi-ai puts back on the block
	// (thinkingSignature, textSignature or thoughtSignature by block type).
	Signature string
}

// IsNull reports whether the entry carries no metadata.
func (e BlockEntry) IsNull() bool { return e.Type == "" }

// EnvelopeError says which member of a replay envelope is unusable. Field is
// empty when the state is not a JSON object at all.
type EnvelopeError struct {
	Field   string
	Problem string
}

func (e *EnvelopeError) Error() string {
	if e.Field == "" {
		return e.Problem
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Problem)
}

func envelopeErrorf(field, format string, args ...any) *EnvelopeError {
	return &EnvelopeError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// ParseReplayEnvelope reads replay state as an envelope. Every member is read
// even after a problem, so a caller can still tell a foreign kind or an old
// version from a malformed rest, and assembly can still align the entries of
// an envelope whose other members are wrong. The error, if any, is an
// *EnvelopeError for the first problem in the order kind, version, response,
// blocks.
func ParseReplayEnvelope(raw []byte) (ReplayEnvelope, error) {
	// Assembly and replay both read every response's envelope, so the usual
	// well-formed envelope is read by a single-pass scanner; anything it is
	// not sure about is read by the general path, which also explains problems.
	if env, ok := scanEnvelope(raw); ok {
		return env, nil
	}
	return parseEnvelope(raw)
}

// parseEnvelope is ParseReplayEnvelope's general path.
func parseEnvelope(raw []byte) (ReplayEnvelope, error) {
	var env ReplayEnvelope
	if jsonKind(raw) != "an object" {
		return env, envelopeErrorf("", "want an object, got %s", jsonKind(raw))
	}
	var members struct {
		Kind     json.RawMessage `json:"kind"`
		Version  json.RawMessage `json:"version"`
		Response json.RawMessage `json:"response"`
		Blocks   json.RawMessage `json:"blocks"`
	}
	if err := unmarshalFast(raw, &members); err != nil {
		return env, envelopeErrorf("", "%v", err)
	}
	env.raw = raw
	find := func(v json.RawMessage) (json.RawMessage, bool) { return v, v != nil }
	var first *EnvelopeError
	note := func(err *EnvelopeError) {
		if first == nil {
			first = err
		}
	}
	if v, ok := find(members.Kind); ok {
		if jsonKind(v) == "a string" {
			_ = unmarshalFast(v, &env.Kind)
		} else {
			note(envelopeErrorf("kind", "want a string, got %s", jsonKind(v)))
		}
	}
	if v, ok := find(members.Version); ok {
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			env.Version = n
		} else {
			note(envelopeErrorf("version", "want an integer, got %s", v))
		}
	}
	if v, ok := find(members.Response); ok {
		if jsonKind(v) == "an object" {
			env.Response = v
		} else {
			note(envelopeErrorf("response", "want an object, got %s", jsonKind(v)))
		}
	}
	if v, ok := find(members.Blocks); ok {
		env.HasBlocks = true
		if err := env.parseBlocks(v); err != nil {
			note(err)
		}
	}
	if first != nil {
		return env, first
	}
	return env, nil
}

func (env *ReplayEnvelope) parseBlocks(v json.RawMessage) *EnvelopeError {
	if jsonKind(v) != "an array" {
		return envelopeErrorf("blocks", "want an array, got %s", jsonKind(v))
	}
	var wire []*blockEntryWire // a null entry decodes to nil
	if err := unmarshalFast(v, &wire); err != nil {
		return blocksError(v, err)
	}
	entries := make([]BlockEntry, len(wire))
	for i, w := range wire {
		if w == nil {
			continue
		}
		entry, err := w.entry()
		if err != nil {
			err.Field = fmt.Sprintf("blocks[%d]%s", i, err.Field)
			return err
		}
		entries[i] = entry
	}
	env.Blocks = entries
	return nil
}

type blockEntryWire struct {
	Type      json.RawMessage `json:"type"`
	Signature json.RawMessage `json:"signature"`
}

func (w *blockEntryWire) entry() (BlockEntry, *EnvelopeError) {
	var entry BlockEntry
	if jsonKind(w.Type) != "a string" {
		return entry, envelopeErrorf(".type", "want a block type string, got %s", jsonKind(w.Type))
	}
	_ = unmarshalFast(w.Type, &entry.Type)
	if entry.Type == "" {
		return entry, envelopeErrorf(".type", "empty block type")
	}
	if w.Signature != nil && jsonKind(w.Signature) != "null" {
		if jsonKind(w.Signature) != "a string" {
			return entry, envelopeErrorf(".signature", "want a string, got %s", jsonKind(w.Signature))
		}
		_ = unmarshalFast(w.Signature, &entry.Signature)
	}
	return entry, nil
}

// blocksError names the first entry that is neither an object nor null.
func blocksError(v json.RawMessage, err error) *EnvelopeError {
	var items []json.RawMessage
	if json.Unmarshal(v, &items) == nil {
		for i, item := range items {
			if k := jsonKind(item); k != "an object" && k != "null" {
				return envelopeErrorf(fmt.Sprintf("blocks[%d]", i), "want an object or null, got %s", k)
			}
		}
	}
	return envelopeErrorf("blocks", "%v", err)
}

// KeepBlocks encodes the envelope with only the entries whose keep flag is
// set; every other member is copied as written. keep must have one flag per
// entry.
func (env ReplayEnvelope) KeepBlocks(keep []bool) ([]byte, error) {
	if !env.HasBlocks || len(keep) != len(env.Blocks) {
		return nil, fmt.Errorf("turnlog: %d keep flags for %d envelope entries", len(keep), len(env.Blocks))
	}
	members, err := orderedMembers(env.raw)
	if err != nil {
		return nil, err
	}
	var o objectWriter
	o.open()
	for _, m := range members {
		if m.key != "blocks" {
			o.raw(m.key, m.value)
			continue
		}
		var items []json.RawMessage
		if err := json.Unmarshal(m.value, &items); err != nil || len(items) != len(keep) {
			return nil, fmt.Errorf("turnlog: envelope blocks changed since parsing")
		}
		o.key(m.key)
		o.buf = append(o.buf, '[')
		first := true
		for i, item := range items {
			if !keep[i] {
				continue
			}
			if !first {
				o.buf = append(o.buf, ',')
			}
			first = false
			o.buf, err = appendCompactJSON(o.buf, item)
			if err != nil {
				return nil, err
			}
		}
		o.buf = append(o.buf, ']')
	}
	o.close()
	return o.buf, o.err
}

// orderedMembers splits a JSON object into its members in written order.
func orderedMembers(raw []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // the opening brace
		return nil, err
	}
	var members []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string) // object keys are always strings
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		members = append(members, member{key: key, value: value})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the object")
	}
	return members, nil
}
