package sessionlog

import (
	"encoding/json"
	"errors"
	"testing"
)

// parseLine takes goccy/go-json's fast path only where encoding/json would
// decide the same: the same lines accepted, the same fields, the same
// error.
func FuzzParseLineAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"seq":3,"type":"turn/end","turn":2,"reason":"stop"}`,
		`{"seq":3,"type":"chunk","turn":2,"delta":{"type":"text","text":"a\u2028b"}}`,
		`{"SEQ":3,"Type":"x"}`, `{"seq":3.0,"type":"x"}`, `{"seq":3,"type":"x","seq":4}`,
		`{"seq":3,"type":"x"} `, `{"seq":3,"type":"x"}x`, `{"seq":3,"type":"\xff"}`,
		`{"seq":3,"type":"x","turn":-1}`, `{"seq":null,"type":"x"}`, `{"seq":3,"type":"x","reason":7}`,
		`{"seq":"3","type":"x"}`, `[{"seq":3}]`, `{"seq":3,"type":"x","turn":1e2}`, `{"seq":99999999999999999999,"type":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, gotErr := parseLine("k", 1, 3, raw)
		var h header
		stdErr := json.Unmarshal(raw, &h)
		if (gotErr == nil) != (stdErr == nil && h.Seq != nil && *h.Seq == 3 && h.Type != "") {
			t.Fatalf("%q: parseLine %v, encoding/json %v (%+v)", raw, gotErr, stdErr, h)
		}
		if gotErr == nil {
			if got.Type != h.Type || got.Turn != h.Turn || got.Reason != h.Reason {
				t.Fatalf("%q: parseLine %+v, encoding/json %+v", raw, got, h)
			}
			return
		}
		if stdErr != nil {
			var de *DataError
			if !errors.As(gotErr, &de) || de.Msg != "invalid JSON: "+stdErr.Error() {
				t.Fatalf("%q: parseLine says %v, encoding/json %v", raw, gotErr, stdErr)
			}
		}
	})
}
