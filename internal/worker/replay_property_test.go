package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/derived"

	"github.com/turnlog/turnlog/internal/forkcut"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// For random logs — toolUse turns answered by the next turn, aborted and
// errored turns, orphan results, model switches, system messages held back
// behind open calls (across runs too), forks, both release lines — the transcript the
// worker's replay runs store, over every split of the log into runs, is the
// transcript of a replay of the whole log, byte for byte, and so are its
// counts. Every run is checked, not only the last: after each one the stored
// transcript is the whole replay through the turn it stopped at.
func TestReplayRunsEqualAWholeReplayOverEverySplit(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("REPLAY_SPLIT_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("REPLAY_SPLIT_SEED=%q: %v", s, err)
		}
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	targets := []turnlog.Adapter{{}, {API: "openai-responses", Provider: "openai", Model: "gpt-5"}, {ReleaseLine: turnlog.ReleaseLine073}}
	var logs, forks, splits, runs int
	defaultPassEvents := passEvents
	defer func() { passEvents = defaultPassEvents }()
	for i := range 60 {
		g := &splitGen{r: r}
		data := g.log(2 + r.IntN(5))
		name := fmt.Sprintf("log %d", i)
		if i%3 == 2 {
			data = g.fork(t, data)
			name = fmt.Sprintf("fork %d", i)
			forks++
		}
		logs++
		target := targets[i%len(targets)]
		// Half the logs with runs of several passes, each as short as a
		// few events.
		passEvents = defaultPassEvents
		if i%2 == 1 {
			passEvents = 1 + r.IntN(8)
		}
		ns, nr := checkEverySplit(t, r, data, target, fmt.Sprintf("%s (seed %d; REPLAY_SPLIT_SEED=%d reproduces it)", name, seed, seed))
		splits += ns
		runs += nr
		if t.Failed() {
			return
		}
	}
	t.Logf("%d logs (%d of them forks), %d splits, %d runs, each run's stored transcript equal to a whole replay (seed %d)", logs, forks, splits, runs, seed)
}

// checkEverySplit replays data in runs for every set of turn boundaries the
// runs stop at (up to 64 sets) and compares after each run.
func checkEverySplit(t *testing.T, r *rand.Rand, data []byte, target turnlog.Adapter, name string) (splits, runs int) {
	t.Helper()
	ctx := context.Background()
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines = lines[:len(lines)-1] // the empty tail after the last newline
	var ends []int               // line index of each turn/end
	// settled[i]: no turn is open after line i, so a run takes it in
	settled := make([]bool, len(lines))
	inTurn := false
	for i, l := range lines {
		switch {
		case bytes.Contains(l, []byte(`"type":"turn/start"`)):
			inTurn = true
		case bytes.Contains(l, []byte(`"type":"turn/end"`)):
			ends = append(ends, i)
			inTurn = false
		}
		settled[i] = !inTurn
	}
	whole := map[int64][]byte{} // through a turn/end's seq: the transcript and counts
	wholeAt := func(through int64) []byte {
		if w, ok := whole[through]; ok {
			return w
		}
		res, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(data)).All(), replay.Options{Target: target, Through: through, Reread: replay.RereadBytes(data)})
		if err != nil {
			t.Fatalf("%s: whole replay: %v", name, err)
		}
		w, _ := json.Marshal(struct {
			M []replay.Message
			C replay.Counts
		}{res.Messages, res.Counts})
		whole[through] = w
		return w
	}
	masks := 1 << (len(ends) - 1)
	for n := range min(masks, 64) {
		mask := n
		if masks > 64 {
			mask = r.IntN(masks)
		}
		splits++
		log := newMemLog(t, nil)
		from := 0
		for b, end := range ends {
			if b < len(ends)-1 && mask&(1<<b) == 0 {
				continue
			}
			// The run starts with part of the next turn in the log already:
			// it must wait for that turn's end.
			to := end + 1
			if b < len(ends)-1 {
				to += r.IntN(ends[b+1] - end)
			}
			log.append(t, bytes.Join(lines[from:to], nil))
			from = to
			sum, err := Replay(ctx, log, target)
			if err != nil {
				t.Fatalf("%s: run: %v", name, err)
			}
			runs++
			stored, err := derived.LoadTranscript(ctx, log, target)
			if err != nil {
				t.Fatalf("%s: read the stored transcript: %v", name, err)
			}
			counts := replay.Counts{Native: int(sum.Replay.Native), Foreign: int(sum.Replay.Foreign),
				Degraded: int(sum.Replay.Degraded), OrphanToolResults: int(sum.Replay.OrphanToolResults)}
			if counts != stored.Counts {
				t.Fatalf("%s: the run's summary counts %+v, its stored transcript's %+v", name, counts, stored.Counts)
			}
			got, _ := json.Marshal(struct {
				M []replay.Message
				C replay.Counts
			}{stored.Messages, stored.Counts})
			last := to - 1
			for !settled[last] {
				last--
			}
			if want := wholeAt(wantSeq(lines[last])); !bytes.Equal(got, want) || sum.ThroughSeq != wantSeq(lines[last]) {
				t.Fatalf("%s, target %+v, runs stopping after turns %b: after the run through seq %d (summary through %d) the stored transcript differs from a whole replay:\n got %s\nwant %s\nlog:\n%s",
					name, target, mask, wantSeq(lines[last]), sum.ThroughSeq, got, want, data)
			}
		}
	}
	return splits, runs
}

func wantSeq(line []byte) int64 {
	var e struct{ Seq int64 }
	if err := json.Unmarshal(line, &e); err != nil {
		panic(err)
	}
	return e.Seq
}

// splitGen writes random logs.
type splitGen struct {
	r      *rand.Rand
	events []string // without seq and time
	base   int64    // the seq of events[0]
	turns  int
	ids    int
	open   []string // call ids the next turn may answer
	// messages are the seqs of the events that carry a message: what a
	// compaction may keep from and an edit may change.
	messages []int64
}

func (g *splitGen) add(format string, args ...any) {
	g.events = append(g.events, fmt.Sprintf(format, args...))
}

// addMessage adds an event that carries a message.
func (g *splitGen) addMessage(format string, args ...any) {
	g.messages = append(g.messages, g.base+int64(len(g.events)))
	g.add(format, args...)
}

// recent picks one of the last n message seqs.
func (g *splitGen) recent(n int) (int64, bool) {
	if len(g.messages) == 0 {
		return 0, false
	}
	from := max(0, len(g.messages)-n)
	return g.messages[from+g.r.IntN(len(g.messages)-from)], true
}

// context adds context events: inserted messages, compactions (some
// keeping nothing, some cutting a turn), edits. turn is 0 between turns.
func (g *splitGen) context(turn int) {
	at := ""
	if turn > 0 {
		at = fmt.Sprintf(`,"turn":%d`, turn)
	}
	if g.r.Float64() < 0.15 {
		g.addMessage(`"type":"context/message"%s,"origin":"bash","content":[{"type":"text","text":"Ran ls: %d files"}]`, at, g.r.IntN(100))
	}
	if g.r.Float64() < 0.12 {
		self := g.base + int64(len(g.events))
		kept, ok := g.recent(8)
		if !ok || g.r.Float64() < 0.1 {
			kept = self
		}
		system := ""
		if g.r.Float64() < 0.5 {
			system = `,"systemMessage":{"content":"the whole prompt","toolsAdded":[{"name":"grep"}]}`
		}
		g.addMessage(`"type":"context/compaction"%s,"content":[{"type":"text","text":"summary %d"}],"firstKeptSeq":%d,"tokensBefore":1000%s`, at, self, kept, system)
	}
	if target, ok := g.recent(10); ok && g.r.Float64() < 0.12 {
		// Edits of a message edited before, and edits that give an
		// assistant message a recent call (perhaps one an earlier edit took
		// away), read the log again.
		replacement := []string{`null`, `{"content":[{"type":"text","text":"edited"}]}`, `{"content":"edited as a string"}`,
			fmt.Sprintf(`{"content":[{"type":"text","text":"edited"},{"type":"toolCall","id":"c%d","name":"grep","arguments":{}}]}`, max(1, g.ids-g.r.IntN(3)))}[g.r.IntN(4)]
		g.add(`"type":"context/edit"%s,"targetSeq":%d,"replacement":%s`, at, target, replacement)
	}
}

// log returns a log of n turns.
func (g *splitGen) log(n int) []byte {
	a := loggen.Adapter
	g.add(`"type":"session/start","adapter":{"kind":"pi-ai","api":%q,"provider":%q,"model":%q}`, a.API, a.Provider, a.Model)
	for range n {
		g.turn()
	}
	return g.render(0)
}

// fork cuts data inside a random turn, as the fork controller does, and
// continues the child with new turns.
func (g *splitGen) fork(t *testing.T, data []byte) []byte {
	t.Helper()
	anchor := g.r.IntN(bytes.Count(data, []byte("\n")))
	p, err := forkcut.Find(turnlog.NewReader(bytes.NewReader(data)).All(), fmt.Sprintf("%d.1", anchor))
	if err != nil {
		t.Fatal(err)
	}
	var child bytes.Buffer
	w := turnlog.NewWriter(&child)
	if err := forkcut.WriteChild(turnlog.NewReader(bytes.NewReader(data)).All(), w, p); err != nil {
		t.Fatal(err)
	}
	// The child goes on from the cut: its turns continue the numbering, and
	// calls its last turn left open may be answered.
	g.events, g.turns, g.base = nil, int(p.CutTurn), p.CutSeq+1
	g.messages = slices.DeleteFunc(g.messages, func(s int64) bool { return s > p.CutSeq })
	for range 1 + g.r.IntN(3) {
		g.turn()
	}
	return append(child.Bytes(), g.render(p.CutSeq+1)...)
}

// render numbers events from seq and gives each a time.
func (g *splitGen) render(seq int64) []byte {
	var b bytes.Buffer
	for _, e := range g.events {
		ts := time.UnixMilli(1_795_000_000_000 + seq*137).UTC().Format("2006-01-02T15:04:05.000Z")
		fmt.Fprintf(&b, `{"seq":%d,"time":%q,%s}`+"\n", seq, ts, e)
		seq++
	}
	return b.Bytes()
}

func (g *splitGen) results(turn int, ids []string) {
	for _, id := range ids {
		if g.r.Float64() < 0.85 {
			g.addMessage(`"type":"tool/result","turn":%d,"toolCallId":%q,"toolName":"grep","content":[{"type":"text","text":"ok"}],"isError":false`, turn, id)
		}
		if g.r.Float64() < 0.05 {
			g.addMessage(`"type":"tool/result","turn":%d,"toolCallId":%q,"toolName":"grep","content":[],"isError":true`, turn, id)
		}
	}
}

func (g *splitGen) turn() {
	g.turns++
	n := g.turns
	if g.r.Float64() < 0.3 {
		// Between turns; held back when the last turn left calls open.
		g.addMessage(`"type":"system/message","content":"mode %d","sections":{"<env>":"<env>%d</env>"}`, n, n)
	}
	g.context(0)
	g.add(`"type":"turn/start","turn":%d`, n)
	open := g.open
	g.open = nil
	if len(open) > 0 && g.r.Float64() < 0.7 {
		g.results(n, open) // answers to the last turn's calls
	}
	if len(open) == 0 || g.r.Float64() < 0.4 {
		g.addMessage(`"type":"user/message","turn":%d,"content":[{"type":"text","text":"q%d"}]`, n, n)
	}
	reason := "stop"
	steps := 1 + g.r.IntN(3)
	for response := range steps {
		var ids []string
		var blocks, entries []string
		if g.r.Float64() < 0.5 {
			blocks = append(blocks, `{"type":"thinking","thinking":"plan"}`)
			entries = append(entries, `{"type":"thinking","signature":"sigT"}`)
		}
		blocks = append(blocks, `{"type":"text","text":"answer"}`)
		entries = append(entries, `null`)
		for range g.r.IntN(3) {
			g.ids++
			id := fmt.Sprintf("c%d", g.ids)
			if g.ids > 1 && g.r.Float64() < 0.1 {
				id = fmt.Sprintf("c%d", g.ids-1)
			}
			ids = append(ids, id)
			blocks = append(blocks, fmt.Sprintf(`{"type":"toolCall","id":%q,"name":"grep","arguments":{}}`, id))
			entries = append(entries, `null`)
		}
		stop := "stop"
		switch {
		case g.r.Float64() < 0.1:
			stop = "aborted"
		case g.r.Float64() < 0.05:
			stop = "error"
		case len(ids) > 0 && g.r.Float64() < 0.85:
			stop = "toolUse"
		case g.r.Float64() < 0.1:
			stop = "length"
		}
		reason = stop
		model := loggen.Adapter.Model
		if g.r.Float64() < 0.2 {
			model = "claude-haiku-4-5"
		}
		state := fmt.Sprintf(`{"kind":"pi-ai","version":2,"blocks":[%s]}`, strings.Join(entries, ","))
		switch {
		case g.r.Float64() < 0.05:
			state = `{"kind":"pi-ai","version":3}` // degrades the message
		case g.r.Float64() < 0.2:
			state = ""
		}
		if g.r.Float64() < 0.5 {
			msg := fmt.Sprintf(`{"content":[%s],"api":"anthropic-messages","provider":"anthropic","model":%q,"stopReason":%q`, strings.Join(blocks, ","), model, stop)
			if state != "" {
				msg += `,"replayState":` + state
			}
			g.addMessage(`"type":"assistant/message","turn":%d,"response":%d,"message":%s}`, n, response, msg)
		} else {
			g.add(`"type":"response/start","turn":%d,"response":%d,"adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":%q}`, n, response, model)
			for i, b := range blocks {
				var v struct {
					Type, Text, Thinking, ID string
				}
				_ = json.Unmarshal([]byte(b), &v)
				switch v.Type {
				case "text":
					g.add(`"type":"chunk","turn":%d,"response":%d,"block":%d,"delta":{"type":"text","text":%q}`, n, response, i, v.Text)
				case "thinking":
					g.add(`"type":"chunk","turn":%d,"response":%d,"block":%d,"delta":{"type":"thinking","thinking":%q}`, n, response, i, v.Thinking)
				default:
					g.add(`"type":"chunk","turn":%d,"response":%d,"block":%d,"delta":{"type":"toolCall","id":%q,"name":"grep","argumentsDelta":"{}"}`, n, response, i, v.ID)
				}
			}
			if stop != "aborted" || g.r.Float64() < 0.5 { // an aborted stream may just stop
				finish := fmt.Sprintf(`"type":"response/finish","turn":%d,"response":%d,"stopReason":%q`, n, response, stop)
				if state != "" {
					finish += `,"replayState":` + state
				}
				g.addMessage("%s", finish)
			}
		}
		if stop == "aborted" || stop == "error" {
			if g.r.Float64() < 0.3 {
				g.results(n, ids) // the host ran them before the stream broke: orphans
			}
			break
		}
		if stop != "toolUse" {
			break
		}
		if g.r.Float64() < 0.2 {
			g.addMessage(`"type":"system/message","turn":%d,"content":[{"type":"text","text":"tools changed"}],"toolsRemoved":[{"name":"grep"}]`, n)
		}
		if g.r.Float64() < 0.3 {
			g.context(n) // inside the turn, between a tool call and its results
		}
		if response == steps-1 && g.r.Float64() < 0.6 {
			g.open = ids // answered by the next turn
			break
		}
		g.results(n, ids)
	}
	g.add(`"type":"turn/end","turn":%d,"reason":%q`, n, reason)
}
