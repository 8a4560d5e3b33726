package turnlog

import gojson "github.com/goccy/go-json"

// unmarshalEvent is the hot-path JSON decoder of DecodeEvent. goccy/go-json
// decodes the project's generated benchmark log several times faster than
// encoding/json into the same struct (docs/benchmarks.md, "Decoding"), with
// the same strictness on malformed input; the careful path that names a bad
// field stays on encoding/json, whose error types it inspects.
func unmarshalEvent(line []byte, w *wireEvent) error {
	return gojson.Unmarshal(line, w)
}

// unmarshalFast decodes the small JSON values read on replay's hot path
// (replay envelopes and their entries) with the same library.
func unmarshalFast(data []byte, v any) error {
	return gojson.Unmarshal(data, v)
}
