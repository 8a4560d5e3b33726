package turnlog_test

import (
	"bytes"
	"encoding/json"
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
			again, err := turnlog.NewReaderWith(&written, nil).Next()
			if err != nil {
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
