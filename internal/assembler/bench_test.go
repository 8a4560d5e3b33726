package assembler_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// BenchmarkAssembleBlocks assembles one response of n blocks, each streamed
// as two text chunks, with an envelope holding one entry per block: the
// shape of a response that makes assembly's per-block bookkeeping show.
// Events are decoded as they are generated, so memory holds the
// assembler's state, not the log.
func BenchmarkAssembleBlocks(b *testing.B) {
	for _, n := range []int{1_000, 80_000, 1_000_000} {
		b.Run(fmt.Sprintf("blocks=%d", n), func(b *testing.B) {
			for b.Loop() {
				res := assembleBlocks(b, n)
				if len(res.Messages) != 1 || len(res.Messages[0].Message.Content) != n {
					b.Fatalf("assembled %d messages, want 1 with %d blocks", len(res.Messages), n)
				}
			}
		})
	}
}

func assembleBlocks(tb testing.TB, n int) assembler.Result {
	res := assembler.Result{}
	a := assembler.New(turnlog.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude"})
	seq := int64(0)
	add := func(line []byte) {
		e, err := turnlog.DecodeEvent(line)
		if err != nil {
			tb.Fatalf("seq %d: %v", seq, err)
		}
		out := a.Add(&e)
		if out.Message != nil {
			res.Messages = append(res.Messages, *out.Message)
		}
		res.Diagnostics = append(res.Diagnostics, out.Diagnostics...)
		seq++
	}
	head := func(typ string) []byte {
		return fmt.Appendf(nil, `{"seq":%d,"type":%q,"turn":1`, seq, typ)
	}
	add(append(head("turn/start"), '}'))
	add(append(head("response/start"), `,"response":0}`...))
	for block := range n {
		for part := range 2 {
			line := append(head("chunk"), `,"response":0,"block":`...)
			line = strconv.AppendInt(line, int64(block), 10)
			line = append(line, `,"delta":{"type":"text","text":"part `...)
			line = strconv.AppendInt(line, int64(part), 10)
			line = append(line, ` "}}`...)
			add(line)
		}
	}
	// null entries keep a million-block envelope under the line limit.
	finish := append(head("response/finish"), `,"response":0,"stopReason":"stop","replayState":{"kind":"pi-ai","version":2,"response":{"id":"r"},"blocks":[`...)
	finish = append(finish, strings.Repeat("null,", n-1)...)
	finish = append(finish, "null]}}"...)
	add(finish)
	add(append(head("turn/end"), `,"reason":"stop"}`...))
	if len(res.Diagnostics) > 0 {
		tb.Fatalf("diagnostics: %v", res.Diagnostics[0])
	}
	return res
}
