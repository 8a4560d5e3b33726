package turnlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"
)

// objectWriter appends compact JSON objects, member by member in the order
// written, to buf. Messages are encoded on replay's hot path, so it avoids
// reflection and re-validating what was decoded.
type objectWriter struct {
	buf       []byte
	needComma bool
	err       error
}

func (o *objectWriter) open() {
	o.buf = append(o.buf, '{')
	o.needComma = false
}

func (o *objectWriter) close() {
	o.buf = append(o.buf, '}')
	o.needComma = true
}

func (o *objectWriter) key(k string) {
	if o.needComma {
		o.buf = append(o.buf, ',')
	}
	o.buf = appendJSONString(o.buf, k)
	o.buf = append(o.buf, ':')
	o.needComma = true
}

// raw writes a member whose value is JSON text, compacted.
func (o *objectWriter) raw(k string, v []byte) {
	o.key(k)
	var err error
	o.buf, err = appendCompactJSON(o.buf, v)
	if err != nil && o.err == nil {
		o.err = fmt.Errorf("member %q: %w", k, err)
	}
}

// optRaw writes a member whose value is JSON text, if there is one.
func (o *objectWriter) optRaw(k string, v []byte) {
	if len(v) > 0 {
		o.raw(k, v)
	}
}

func (o *objectWriter) string(k, v string) {
	o.key(k)
	o.buf = appendJSONString(o.buf, v)
}

func (o *objectWriter) optString(k, v string) {
	if v != "" {
		o.string(k, v)
	}
}

func (o *objectWriter) bool(k string, v bool) {
	o.key(k)
	o.buf = strconv.AppendBool(o.buf, v)
}

func (o *objectWriter) optInt(k string, v int64) {
	if v != 0 {
		o.key(k)
		o.buf = strconv.AppendInt(o.buf, v, 10)
	}
}

func (o *objectWriter) extra(extra map[string]json.RawMessage) {
	if len(extra) == 0 {
		return // nearly every block and message: skip sorting no keys
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		o.raw(k, extra[k])
	}
}

// appendCompactJSON appends JSON text without insignificant whitespace. Text
// that has none — nearly all of it, since it was decoded from compact lines —
// is copied as is.
func appendCompactJSON(dst, raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return dst, fmt.Errorf("empty JSON value")
	}
	if !hasInsignificantSpace(raw) {
		return append(dst, raw...), nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return dst, err
	}
	return append(dst, b.Bytes()...), nil
}

func hasInsignificantSpace(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
			return true
		case '"':
			// Jump to the closing quote: content is mostly long strings, and
			// IndexByte finds a quote far faster than a byte-by-byte loop.
			for {
				end := bytes.IndexByte(raw[i+1:], '"')
				if end < 0 {
					return false // unterminated: the rest is inside the string
				}
				i += 1 + end
				if !escaped(raw, i) {
					break
				}
			}
		}
	}
	return false
}

// escaped reports whether the byte at i follows an odd number of backslashes.
func escaped(raw []byte, i int) bool {
	n := 0
	for i > 0 && raw[i-1] == '\\' {
		n++
		i--
	}
	return n%2 == 1
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Like encoding/json it
// replaces invalid UTF-8 with U+FFFD and escapes U+2028 and U+2029; unlike
// it, it leaves <, > and & alone, since the output is not meant for HTML.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
