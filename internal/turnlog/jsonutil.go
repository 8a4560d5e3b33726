package turnlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// fieldError is a problem with one member of a JSON object. Field is a path
// such as `message.content[2].arguments`, so a user can find the value.
type fieldError struct {
	field string
	msg   string
}

func (e *fieldError) Error() string { return fmt.Sprintf("field %q: %s", e.field, e.msg) }

func fieldErrorf(field, format string, args ...any) error {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

// prefixField places err under the member parent.
func prefixField(parent string, err error) error {
	if fe, ok := errors.AsType[*fieldError](err); ok {
		return &fieldError{field: parent + "." + fe.field, msg: fe.msg}
	}
	return &fieldError{field: parent, msg: err.Error()}
}

// jsonKind names the JSON type of raw for error messages.
func jsonKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		if bytes.HasPrefix(raw, []byte("true")) || bytes.HasPrefix(raw, []byte("false")) {
			return "a boolean"
		}
	case 'n':
		if bytes.HasPrefix(raw, []byte("null")) {
			return "null"
		}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "a number"
	}
	// Name what is there instead: it starts no JSON value.
	if r, size := utf8.DecodeRune(raw); r != utf8.RuneError || size > 1 {
		return fmt.Sprintf("%q, which starts no JSON value", r)
	}
	return fmt.Sprintf("byte 0x%02x, which starts no JSON value", raw[0])
}

// objectMembers splits a JSON object into its members.
func objectMembers(data []byte) (map[string]json.RawMessage, error) {
	if jsonKind(data) != "an object" {
		return nil, fmt.Errorf("want an object, got %s", jsonKind(data))
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return nil, err
	}
	return members, nil
}

func decodeString(raw json.RawMessage, field string, out *string) error {
	if jsonKind(raw) != "a string" {
		return fieldErrorf(field, "want a string, got %s", jsonKind(raw))
	}
	return json.Unmarshal(raw, out)
}

func decodeBool(raw json.RawMessage, field string, out *bool) error {
	if jsonKind(raw) != "a boolean" {
		return fieldErrorf(field, "want a boolean, got %s", jsonKind(raw))
	}
	return json.Unmarshal(raw, out)
}
