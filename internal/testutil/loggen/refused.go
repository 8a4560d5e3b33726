package loggen

import (
	"bytes"
	"fmt"
)

// RefusedLog is a session of claude-opus-5 (managed effort) with turns
// turns, whose answer to turn 2 (seq 7) reports, as pi-ai 1.6 records
// Anthropic's input_transformations, that the provider dropped the
// thinking of the answer to turn 1 (seq 3, block 0) for a prefix mismatch;
// each later answer reports it again. Turn k's events are seqs 4k-3..4k.
func RefusedLog(turns int) []byte {
	ev := []string{`"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-opus-5","releaseLine":"1"}`}
	for turn := 1; turn <= turns; turn++ {
		diags := ""
		if turn > 1 {
			diags = `,"diagnostics":[{"type":"anthropic_input_transformations","timestamp":1,"details":{"transformations":[{"type":"thinking_dropped","path":"messages.2.content.0","reason":"prefix_binding_mismatch"}]}}]`
		}
		ev = append(ev,
			fmt.Sprintf(`"type":"turn/start","turn":%d`, turn),
			fmt.Sprintf(`"type":"user/message","turn":%d,"content":"question %d"`, turn, turn),
			fmt.Sprintf(`"type":"assistant/message","turn":%d,"response":0,"message":{"content":[{"type":"thinking","thinking":"think %d","thinkingSignature":"sig%d"},{"type":"text","text":"answer %d"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-opus-5","stopReason":"stop","providerThinkingLevel":"high"%s}`, turn, turn, turn, turn, diags),
			fmt.Sprintf(`"type":"turn/end","turn":%d,"reason":"stop"`, turn))
	}
	var b bytes.Buffer
	for seq, e := range ev {
		fmt.Fprintf(&b, `{"seq":%d,%s}`+"\n", seq, e)
	}
	return b.Bytes()
}
