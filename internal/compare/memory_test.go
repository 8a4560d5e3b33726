package compare

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/heappeak"
)

// prefixBytes is the size of the turn the two logs of
// TestComparisonHoldsTheBranchesNotThePrefix share, and heapBound what the
// comparison may hold over the heap it starts with: a third of it.
const (
	prefixBytes = 48 << 20
	heapBound   = 16 << 20
)

// TestComparisonHoldsTheBranchesNotThePrefix compares a long Session with
// its child: they share a first turn whose response streamed 48 MiB of
// text, a compaction that left it out of the context, and a short second
// turn, then have a turn each. The comparison reads both logs through the
// shared part and must not hold it: its peak heap stays under a third of
// it.
func TestComparisonHoldsTheBranchesNotThePrefix(t *testing.T) {
	b, err := store.Open(t.Context(), "file://"+t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := &sessions{t: t, logs: sessionlog.New(b)}
	s.write("long", []byte(`{"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}}
{"type":"turn/start","turn":1}
{"type":"user/message","turn":1,"content":"Write it all down."}
{"type":"response/start","turn":1,"response":0}
`))
	piece := strings.Repeat("all of it ", 64<<10/10)
	chunks := make([]byte, 0, 4<<20+1<<10)
	n := prefixBytes / len(piece)
	for range n {
		chunks = fmt.Appendf(chunks, `{"type":"chunk","turn":1,"response":0,"block":0,"delta":{"type":"text","text":%q}}`+"\n", piece)
		if len(chunks) >= 4<<20 {
			s.write("long", chunks)
			chunks = chunks[:0]
		}
	}
	s.write("long", chunks)
	// The chunks are seqs 4..n+3; the compaction, at n+6, keeps nothing
	// before it, and turn 2 ends at n+9.
	compaction, cut := int64(n+6), int64(n+9)
	s.write("long", fmt.Appendf(nil, `{"type":"response/finish","turn":1,"response":0,"stopReason":"stop"}
{"type":"turn/end","turn":1,"reason":"stop"}
{"type":"context/compaction","content":[{"type":"text","text":"The user asked for everything written down; it was."}],"firstKeptSeq":%d,"tokensBefore":12000000}
{"type":"turn/start","turn":2}
{"type":"user/message","turn":2,"content":"Now the short version."}
{"type":"turn/end","turn":2,"reason":"stop"}
`, compaction))
	s.fork("long", "long-retry", cut)
	s.write("long", []byte(`{"type":"turn/start","turn":3}`+"\n"+`{"type":"user/message","turn":3,"content":"One line."}`+"\n"+`{"type":"turn/end","turn":3,"reason":"stop"}`+"\n"))
	s.write("long-retry", []byte(`{"type":"turn/start","turn":3}`+"\n"+`{"type":"user/message","turn":3,"content":"Two lines."}`+"\n"+`{"type":"turn/end","turn":3,"reason":"stop"}`+"\n"))
	s.replay("long", "long-retry")

	var c Comparison
	start := time.Now()
	peak, _ := heappeak.Over(heapBound, func() {
		if c, err = Compare(t.Context(), s.branch("long"), s.branch("long-retry")); err != nil {
			t.Error(err)
		}
	})
	if c.Shared.CutSeq != cut || c.Shared.Turns != 2 || len(c.A.Turns) != 1 || len(c.B.Turns) != 1 ||
		c.A.Turns[0].Entries[0].Text != "One line." || c.B.Turns[0].Entries[0].Text != "Two lines." {
		t.Errorf("shared %+v, A %q, B %q", c.Shared, describe(c.A), describe(c.B))
	}
	t.Logf("compared two logs sharing %d MiB: peak heap %.1f MiB over the baseline, %v", prefixBytes>>20, float64(peak)/(1<<20), time.Since(start).Round(time.Millisecond))
	if peak > heapBound {
		t.Errorf("peak heap %.1f MiB over the baseline, more than the bound of %d MiB: the shared prefix is held", float64(peak)/(1<<20), heapBound>>20)
	}
}
