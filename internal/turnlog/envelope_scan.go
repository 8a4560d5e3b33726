package turnlog

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// scanEnvelope reads a well-formed replay envelope in one pass, without
// reflection and without copying: the members and entries refer to raw. It
// gives up (ok false) on anything that is not plainly valid — a member of an
// unexpected JSON type, a duplicate or case-folded key, an escaped or
// non-ASCII key or string, a value it cannot prove valid JSON — and leaves
// that to parseEnvelope, so whenever it answers, the answer is parseEnvelope's.
func scanEnvelope(raw []byte) (env ReplayEnvelope, ok bool) {
	s := jsonScanner{data: raw}
	s.space()
	if !s.take('{') {
		return env, false
	}
	var seenKind, seenVersion, seenResponse bool
	if !s.members(func(key []byte) bool {
		switch string(key) {
		case "kind":
			v, ok := s.plainString()
			if !ok || seenKind {
				return false
			}
			seenKind, env.Kind = true, internString(v)
		case "version":
			start := s.pos
			if !s.number() || seenVersion {
				return false
			}
			n, err := strconv.ParseInt(string(raw[start:s.pos]), 10, 64)
			if err != nil {
				return false // a fraction, an exponent or out of range
			}
			seenVersion, env.Version = true, n
		case "response":
			start := s.pos
			if s.peek() != '{' || !s.value(0) || seenResponse {
				return false
			}
			seenResponse, env.Response = true, raw[start:s.pos]
		case "blocks":
			if s.peek() != '[' || env.HasBlocks {
				return false
			}
			blocks, ok := s.blockEntries()
			if !ok {
				return false
			}
			env.HasBlocks, env.Blocks = true, blocks
		default:
			return !foldsTo(key, "kind", "version", "response", "blocks") && s.value(0)
		}
		return true
	}) {
		return ReplayEnvelope{}, false
	}
	s.space()
	if s.pos != len(raw) {
		return ReplayEnvelope{}, false
	}
	env.raw = raw
	return env, true
}

// blockEntries reads the blocks array: each entry null, or an object with a
// non-empty type and an optional string (or null) signature.
func (s *jsonScanner) blockEntries() ([]BlockEntry, bool) {
	s.pos++ // the opening bracket
	entries := make([]BlockEntry, 0, 4)
	s.space()
	if s.take(']') {
		return entries, true
	}
	for {
		var entry BlockEntry
		switch s.peek() {
		case 'n':
			if !s.literal("null") {
				return nil, false
			}
		case '{':
			s.pos++
			var seenType, seenSignature bool
			if !s.members(func(key []byte) bool {
				switch string(key) {
				case "type":
					v, ok := s.plainString()
					if !ok || len(v) == 0 || seenType {
						return false
					}
					seenType, entry.Type = true, internString(v)
				case "signature":
					if seenSignature {
						return false
					}
					seenSignature = true
					if s.peek() == 'n' {
						return s.literal("null")
					}
					v, ok := s.plainString()
					entry.Signature = string(v)
					return ok
				default:
					return !foldsTo(key, "type", "signature") && s.value(0)
				}
				return true
			}) || !seenType {
				return nil, false
			}
		default:
			return nil, false
		}
		entries = append(entries, entry)
		s.space()
		if s.take(']') {
			return entries, true
		}
		if !s.take(',') {
			return nil, false
		}
		s.space()
	}
}

// foldsTo reports whether key matches one of names without regard to case:
// a decoder that folds case would read it as that member.
func foldsTo(key []byte, names ...string) bool {
	for _, name := range names {
		if len(key) != len(name) {
			continue
		}
		same := true
		for i := range key {
			c := key[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != name[i] {
				same = false
				break
			}
		}
		if same {
			return true
		}
	}
	return false
}

// jsonScanner walks strictly valid JSON text; every method reports false on
// anything else, leaving the caller to give up.
type jsonScanner struct {
	data []byte
	pos  int
}

// maxScanDepth bounds the nesting the scanner follows; deeper values are
// left to the general decoder.
const maxScanDepth = 32

func (s *jsonScanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *jsonScanner) take(c byte) bool {
	if s.peek() == c {
		s.pos++
		return true
	}
	return false
}

func (s *jsonScanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *jsonScanner) literal(lit string) bool {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return false
	}
	s.pos += len(lit)
	return true
}

// members reads the members of an object whose opening brace has been
// consumed, calling member with each key (printable ASCII, unescaped) after
// the colon; member reads the value.
func (s *jsonScanner) members(member func(key []byte) bool) bool {
	s.space()
	if s.take('}') {
		return true
	}
	for {
		key, ok := s.plainString()
		if !ok {
			return false
		}
		s.space()
		if !s.take(':') {
			return false
		}
		s.space()
		if !member(key) {
			return false
		}
		s.space()
		if s.take('}') {
			return true
		}
		if !s.take(',') {
			return false
		}
		s.space()
	}
}

// plainString reads a string of printable ASCII without escapes and returns
// its contents.
func (s *jsonScanner) plainString() ([]byte, bool) {
	if !s.take('"') {
		return nil, false
	}
	rest := s.data[s.pos:]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return nil, false
	}
	for _, c := range rest[:end] {
		if c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			return nil, false
		}
	}
	s.pos += end + 1
	return rest[:end], true
}

// internString returns v as a string, without allocating for the block
// types and kind that nearly every envelope names.
func internString(v []byte) string {
	for _, known := range [...]string{BlockThinking, BlockText, BlockToolCall, EnvelopeKindPiAI} {
		if string(v) == known {
			return known
		}
	}
	return string(v)
}

// value skips one JSON value of any type.
func (s *jsonScanner) value(depth int) bool {
	switch c := s.peek(); {
	case c == '{':
		if depth == maxScanDepth {
			return false
		}
		s.pos++
		return s.members(func([]byte) bool { return s.value(depth + 1) })
	case c == '[':
		if depth == maxScanDepth {
			return false
		}
		s.pos++
		s.space()
		if s.take(']') {
			return true
		}
		for {
			if !s.value(depth + 1) {
				return false
			}
			s.space()
			if s.take(']') {
				return true
			}
			if !s.take(',') {
				return false
			}
			s.space()
		}
	case c == '"':
		return s.string()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return false
}

// string skips a string, checking its escapes and its UTF-8.
func (s *jsonScanner) string() bool {
	s.pos++ // the opening quote
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			s.pos++
			switch s.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos++
			case 'u':
				if len(s.data)-s.pos < 5 {
					return false
				}
				for _, h := range s.data[s.pos+1 : s.pos+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				s.pos += 5
			default:
				return false
			}
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(s.data[s.pos:])
			if r == utf8.RuneError && size == 1 {
				return false
			}
			s.pos += size
		default:
			s.pos++
		}
	}
	return false
}

// number skips a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScanner) number() bool {
	s.take('-')
	switch c := s.peek(); {
	case c == '0':
		s.pos++
	case '1' <= c && c <= '9':
		s.digits()
	default:
		return false
	}
	if s.take('.') && !s.digits() {
		return false
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.pos++
		if c := s.peek(); c == '+' || c == '-' {
			s.pos++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits skips one or more decimal digits.
func (s *jsonScanner) digits() bool {
	start := s.pos
	for '0' <= s.peek() && s.peek() <= '9' {
		s.pos++
	}
	return s.pos > start
}
