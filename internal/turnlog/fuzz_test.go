package turnlog_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// FuzzDecode checks that decoding never panics, that only JSON objects are
// accepted, that both decoding paths read an accepted line the same way, and
// that an accepted event encodes — as its raw bytes and from its typed
// payload — to something that decodes to the same event.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := turnlog.DecodeEvent(line)
		if err != nil {
			if _, ok := err.(*turnlog.LineError); !ok {
				t.Fatalf("error %v is %T, want *LineError", err, err)
			}
			return
		}
		if !json.Valid(line) {
			t.Fatalf("accepted a line that is not JSON: %q", line)
		}
		careful, err := turnlog.DecodeByType(line)
		if err != nil {
			t.Fatalf("careful path rejects what the fast path accepts: %v", err)
		}
		assertSameEvent(t, "careful path", e, careful)

		var written bytes.Buffer
		w := turnlog.NewWriter(&written)
		if err := w.Write(e); err != nil {
			if !bytes.ContainsAny(line, "\r\n") {
				t.Fatalf("writer refuses a one-line event: %v", err)
			}
		} else {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			var again turnlog.Event
			for again, err = range turnlog.NewReaderWith(&written, nil).All() {
				break
			}
			if err != nil || again.Raw == nil {
				t.Fatalf("written event does not read back: %v", err)
			}
			assertSameEvent(t, "raw re-encoding", e, again)
			if !bytes.Equal(again.Raw, line) {
				t.Fatalf("raw bytes changed: %q", again.Raw)
			}
		}

		p := e.Payload()
		if p == nil {
			return // unknown type: only the raw form exists
		}
		typed, err := turnlog.NewEvent(e.Seq, e.Turn, e.Time, p)
		if err != nil {
			t.Fatalf("typed re-encoding of %s fails: %v", e.Type, err)
		}
		assertSameEvent(t, "typed re-encoding", e, typed)
	})
}

func assertSameEvent(t *testing.T, what string, want, got turnlog.Event) {
	t.Helper()
	if got.Seq != want.Seq || got.Type != want.Type || got.Turn != want.Turn || got.Time != want.Time {
		t.Fatalf("%s: header %d %q %d %q, want %d %q %d %q", what, got.Seq, got.Type, got.Turn, got.Time, want.Seq, want.Type, want.Turn, want.Time)
	}
	// Compare payloads by their compact encoding: raw members may differ in
	// insignificant whitespace only.
	wp, err1 := json.Marshal(want.Payload())
	gp, err2 := json.Marshal(got.Payload())
	if err1 != nil || err2 != nil || !bytes.Equal(wp, gp) {
		t.Fatalf("%s: payload\n  %s (%v)\nwant\n  %s (%v)", what, gp, err2, wp, err1)
	}
}

// FuzzReplayEnvelope checks that whenever the envelope scanner answers, the
// general path gives the same envelope and finds no problem.
func FuzzReplayEnvelope(f *testing.F) {
	for _, seed := range envelopeSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		scanned, ok := turnlog.ScanEnvelope(raw)
		if !ok {
			return
		}
		parsed, err := turnlog.ParseEnvelope(raw)
		if err != nil {
			t.Fatalf("scanner accepted %q, the general path finds: %v", raw, err)
		}
		if !reflect.DeepEqual(scanned, parsed) {
			t.Fatalf("%q: scanner read %+v, the general path %+v", raw, scanned, parsed)
		}
	})
}

// envelopeSeeds are envelopes as adapters write them, and near misses.
var envelopeSeeds = []string{
	`{"kind":"pi-ai","version":2,"response":{"id":"msg_01","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"},"blocks":[{"type":"thinking","signature":"EqQBCkYIBxgCKkDx3c1b9f2Q0a7rWkq8mXyL1Thinking01"},{"type":"text","signature":"txt_01"},null]}`,
	`{ "version" : 2 , "kind" : "pi-ai" , "blocks" : [ { "type" : "text" , "signature" : null , "x-cache" : [1.5e3, -0, true, false, {"a":"\u00e9\n"}] } ] , "x-new" : "é" }`,
	`{"kind":"pi-ai","version":2,"blocks":[]}`,
	`{"Kind":"pi-ai","version":2}`,
	`{"kind":"pi-ai","kind":"other","version":2}`,
	`{"kind":"pi-\u0061i","version":2}`,
	`{"kind":"pi-ai","version":2.0}`,
	`{"kind":"pi-ai","version":99999999999999999999}`,
	`{"kind":"pi-ai","version":2,"blocks":[{"type":"","signature":"s"}]}`,
	`{"kind":"pi-ai","version":2,"blocks":[{"TYPE":"text"}]}`,
	`{"kind":"pi-ai","version":2,"response":{"a":01}}`,
	`{"kind":"pi-ai","version":2,"response":{"a":"\x"}}`,
	`{"kind":"pi-ai","version":2,} `,
	`{"kind":"pi-ai","version":2} x`,
	`{"thinkingSignatures":["sigA","sigB"],"responseId":"msg_legacy_7"}`,
}
