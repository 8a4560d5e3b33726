package derived

import (
	"bytes"
	"encoding/json"
	"hash/crc32"
	"regexp"
	"testing"

	"github.com/turnlog/turnlog/internal/replay"
)

// decodePart never panics, and hands out exactly the lines the header
// lists.
func FuzzDecodePart(f *testing.F) {
	msgs := []replay.Message{
		{Seq: 2, Role: "user", Message: json.RawMessage(`{"role":"user","content":"hi"}`)},
		{Seq: 7, Role: "assistant", Replay: replay.Native, Message: json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"a\u2028b"}]}`)},
	}
	parts, err := newParts(3, msgs, []replay.Diagnostic{{Code: "REPLAY_DEGRADED", Seq: 7, Cause: "kind", Message: "x"}})
	if err != nil {
		f.Fatal(err)
	}
	good, err := parts[0].encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(regexp.MustCompile(`"bytes":\[\d+`).ReplaceAll(good, []byte(`"bytes":[31`)))
	f.Add([]byte("{\"start\":0,\"seqs\":[0],\"roles\":[\"\"],\"replay\":[\"\"],\"synthetic\":[false],\"bytes\":[1]}\n1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var h partHeader
		line, body, _ := bytes.Cut(data, []byte{'\n'})
		if json.Unmarshal(line, &h) != nil {
			h = partHeader{}
		}
		p, err := decodePart(data, PartRef{Start: h.Start, Count: int64(len(h.Seqs)), Bytes: int64(len(body)), CRC32C: crc32.Checksum(data, castagnoli)})
		if err != nil {
			return
		}
		msgs := p.appendMessages(nil)
		if len(msgs) != len(h.Seqs) {
			t.Fatalf("%d messages handed out, the header lists %d", len(msgs), len(h.Seqs))
		}
		for i, m := range msgs {
			if len(m.Message) != h.Bytes[i] || bytes.IndexByte(m.Message, '\n') >= 0 {
				t.Fatalf("message %d handed out as %q, the header gives it %d bytes", i, m.Message, h.Bytes[i])
			}
		}
	})
}
