package turnlog

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// invalidUTF8 reports the first invalid UTF-8 of a line that has some: the
// member holding it, by its path in the event (content[0].text), and the
// byte. Lines with invalid UTF-8 are refused, not repaired: a JSON
// encoder would write them out raw or silently change them, and the log is
// the source of truth.
func invalidUTF8(line []byte) *LineError {
	at := firstInvalid(line)
	field := invalidField(line, at)
	where := "in the line"
	if field != "" {
		where = "in field " + field
	}
	return lineErrorf(-1, ErrInvalidField, "invalid UTF-8 %s: byte 0x%02x at offset %d", where, line[at], at)
}

func firstInvalid(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return 0
}

// invalidField walks the line's JSON tokens to the one that holds byte
// offset at, and returns its path; "" if the line is not JSON that far.
func invalidField(line []byte, at int) string {
	type frame struct {
		object    bool
		key       string
		index     int
		expectKey bool
	}
	var stack []frame
	path := func() string {
		var b strings.Builder
		for _, f := range stack {
			if f.object {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			} else {
				b.WriteString("[" + strconv.Itoa(f.index) + "]")
			}
		}
		return b.String()
	}
	// next moves the innermost container past a finished value.
	next := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].expectKey = true
			} else {
				stack[n-1].index++
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		end := int(dec.InputOffset())
		here := end > at
		n := len(stack)
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				if here {
					return path()
				}
				stack = append(stack, frame{object: d == '{', expectKey: d == '{'})
			default:
				stack = stack[:n-1]
				next()
			}
			continue
		}
		if n > 0 && stack[n-1].object && stack[n-1].expectKey {
			stack[n-1].key, _ = tok.(string)
			stack[n-1].expectKey = false
			if here {
				return path() + " (its name)"
			}
			continue
		}
		if here {
			return path()
		}
		next()
	}
}
