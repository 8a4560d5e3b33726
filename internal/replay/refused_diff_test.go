package replay_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// The request-layout differential test: conversations are replayed for an
// anthropic-messages target, every block of the transcript's assistant
// messages is given an identity of its own (its message's seq and its
// index), and pi-ai 1.x's anthropic-messages provider — of each pinned 1.x
// release — builds the request from the transcript (test/pi/1/request.mjs).
// Every block of every assistant message of the request must be where
// replay.BuildAnthropicLayout says it is, and every other request message
// must be one the layout says is not an assistant's.

// The layouts compared, each with a model of pi-ai's catalog that has it.
var layoutTargets = []struct {
	model  string
	layout replay.AnthropicLayout
}{
	{"claude-sonnet-4-5", replay.AnthropicLayout{}},
	{"claude-opus-4-8", replay.AnthropicLayout{MidConvoSystem: true, ToolChanges: true}},
	{"claude-opus-5", replay.AnthropicLayout{MidConvoSystem: true, ToolChanges: true, EffortProvider: "anthropic"}},
}

func TestRequestLayoutMatchesPiAI(t *testing.T) {
	line := piLineNamed(t, turnlog.ReleaseLine1)
	seed := diffSeed(t)
	eachRelease(t, line, func(t *testing.T, inst piInstall) { compareRequestLayout(t, line, inst, seed) })
}

// compareRequestLayout compares the layouts with the requests of one
// release, on the same conversations for every release.
func compareRequestLayout(t *testing.T, line piLine, inst piInstall, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x51ed2701))
	conversations := append(namedConversations(), namedConversationsV1()...)
	for i := range 300 {
		conversations = append(conversations, randomConversation(rng, fmt.Sprintf("random %d", i), true))
	}

	type request struct {
		name       string
		layout     replay.AnthropicLayout
		transcript []replay.Message
	}
	var requests []request
	var input []map[string]any
	for _, tg := range layoutTargets {
		target := turnlog.Adapter{Kind: turnlog.EnvelopeKindPiAI, API: "anthropic-messages", Provider: "anthropic", Model: tg.model, ReleaseLine: line.name}
		for _, c := range conversations {
			c = forModel(c, tg.model, rng)
			res, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(c.log(formInline))).All(), replay.Options{Target: target, Through: replay.Head})
			if err != nil {
				t.Fatalf("%s: replay: %v", c.name, err)
			}
			msgs := identified(t, res.Messages)
			raw := make([]json.RawMessage, len(msgs))
			for i, m := range msgs {
				raw[i] = m.Message
			}
			requests = append(requests, request{name: c.name + " for " + tg.model, layout: tg.layout, transcript: msgs})
			input = append(input, map[string]any{"provider": "anthropic", "model": tg.model, "messages": raw})
		}
	}
	in, err := json.Marshal(map[string]any{"requests": input})
	if err != nil {
		t.Fatal(err)
	}
	out := runNode(t, inst, "request.mjs", in)
	var pi struct {
		Results []struct {
			Error    string `json:"error"`
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out, &pi); err != nil || len(pi.Results) != len(requests) {
		t.Fatalf("request.mjs with pi-ai %s wrote %d results for %d requests (%v)", inst.version, len(pi.Results), len(requests), err)
	}

	paths, others, failures := 0, 0, 0
	fail := func(format string, args ...any) {
		failures++
		if failures <= 5 {
			t.Errorf(format, args...)
		}
	}
	effortMarkers := 0
	for r, req := range requests {
		got := pi.Results[r]
		if got.Error != "" {
			t.Fatalf("%s: pi-ai built no request: %s", req.name, got.Error)
		}
		layout, err := replay.BuildAnthropicLayout(req.transcript, req.layout, true)
		if err != nil {
			t.Fatalf("%s: %v", req.name, err)
		}
		if len(layout) != len(got.Messages) {
			fail("%s (seed %d): the layout has %d request messages, pi-ai's request %d", req.name, seed, len(layout), len(got.Messages))
			continue
		}
		for i, m := range got.Messages {
			if m.Role != "assistant" {
				others++
				if m.Role == "system" && string(m.Content) == "[]" {
					effortMarkers++
				}
				if _, err := layout.Locate(fmt.Sprintf("messages.%d.content.0", i)); err == nil {
					fail("%s (seed %d): request message %d is a %s message, the layout has an assistant's", req.name, seed, i, m.Role)
				}
				continue
			}
			var blocks []map[string]any
			if err := json.Unmarshal(m.Content, &blocks); err != nil {
				t.Fatalf("%s: request message %d: %v", req.name, i, err)
			}
			if len(blocks) != len(layout[i]) {
				fail("%s (seed %d): request message %d has %d blocks, the layout %d", req.name, seed, i, len(blocks), len(layout[i]))
				continue
			}
			for j, b := range blocks {
				paths++
				path := fmt.Sprintf("messages.%d.content.%d", i, j)
				ref, err := layout.Locate(path)
				want := blockIdentity(b)
				if got := fmt.Sprintf("b%d.%d", ref.Seq, ref.Block); err != nil || got != want {
					fail("%s (seed %d): %s is block %s in pi-ai's request, the layout says %s (%v)", req.name, seed, path, want, got, err)
				}
			}
		}
	}
	if failures > 0 {
		t.Errorf("%d differences (seed %d)", failures, seed)
	}
	if paths == 0 || effortMarkers == 0 {
		t.Errorf("compared %d assistant block paths and %d effort messages: the cases no longer cover the layouts", paths, effortMarkers)
	}
	t.Logf("pi-ai %s: compared %d requests (%d conversations, %d layouts, seed %d): %d assistant block paths, %d other request messages (%d effort messages)",
		inst.version, len(requests), len(conversations), len(layoutTargets), seed, paths, others, effortMarkers)
}

// forModel is the conversation with the messages of pi's default source
// (claude-sonnet-4-5) written by model instead, so that they replay native
// for that target, and a providerThinkingLevel (pi-ai's managed effort) on
// some assistant messages, among them values that are not an effort.
func forModel(c piConversation, model string, rng *rand.Rand) piConversation {
	out := piConversation{name: c.name}
	for _, turn := range c.turns {
		var msgs []piMessage
		for _, m := range turn {
			if m.role == "assistant" {
				if m.assistant.Adapter() == piSources[0] {
					m.assistant.Model = model
				}
				m.assistant.Extra = maps.Clone(m.assistant.Extra)
				if level := []string{"", "", "high", "low", "max", "off"}[rng.IntN(6)]; level != "" {
					if m.assistant.Extra == nil {
						m.assistant.Extra = map[string]json.RawMessage{}
					}
					m.assistant.Extra["providerThinkingLevel"] = json.RawMessage(strconv.Quote(level))
				}
			}
			msgs = append(msgs, m)
		}
		out.turns = append(out.turns, msgs)
	}
	return out
}

// identified gives every block of the transcript's assistant messages that
// a request could carry an identity, b<seq>.<index>, in each of its
// non-blank strings that pi-ai copies into the request: text, thinking,
// signature, tool-call arguments. Blank strings stay blank: whether a
// block is sent depends on them.
func identified(t *testing.T, msgs []replay.Message) []replay.Message {
	out := make([]replay.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m
		if m.Role != "assistant" {
			continue
		}
		var a turnlog.AssistantMessage
		if err := json.Unmarshal(m.Message, &a); err != nil {
			t.Fatalf("transcript message %d: %v", i, err)
		}
		for j := range a.Content {
			b := &a.Content[j]
			id := fmt.Sprintf("b%d.%d", m.Seq, j)
			switch b.Type {
			case turnlog.BlockText:
				if !isJSBlank(b.Text) {
					b.Text = id
				}
			case turnlog.BlockThinking:
				if b.Redacted || !isJSBlank(b.ThinkingSignature) {
					b.ThinkingSignature = id
				}
				if !b.Redacted && !isJSBlank(b.Thinking) {
					b.Thinking = id
				}
			case turnlog.BlockToolCall:
				b.Arguments = json.RawMessage(fmt.Sprintf(`{"b":%q}`, id))
			}
		}
		raw, err := a.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		out[i].Message = raw
	}
	return out
}

// isJSBlank is JavaScript's s.trim() === "".
func isJSBlank(s string) bool { return strings.TrimFunc(s, isJSSpace) == "" }

// blockIdentity is the identity identified gave the transcript block a
// request block comes from.
func blockIdentity(b map[string]any) string {
	str := func(k string) string { s, _ := b[k].(string); return s }
	switch b["type"] {
	case "text":
		return str("text")
	case "thinking":
		if strings.HasPrefix(str("thinking"), "b") {
			return str("thinking")
		}
		return str("signature")
	case "redacted_thinking":
		return str("data")
	case "tool_use":
		in, _ := b["input"].(map[string]any)
		s, _ := in["b"].(string)
		return s
	}
	return fmt.Sprintf("a %v block", b["type"])
}

// TestReasoningItemsMatchPiAI: OpenAI names a withheld reasoning item by
// its id, and replay maps the id to the thinking block whose signature
// holds that item. pi-ai 1.x's openai-responses provider — of each pinned
// 1.x release — builds the request (test/pi/1/request.mjs): every
// reasoning item it sends must be one of the transcript's thinking blocks,
// by id, and a report removing every item sent must map each to that
// block, none unmapped. Some responses call tools before they answer, so
// that reasoning items are sent between tool-call items, after a call and
// its output: where OpenAI withholds reasoning whose prefix no longer
// matches, and what pi-ai 1.6.1 changed the tool-call items for.
func TestReasoningItemsMatchPiAI(t *testing.T) {
	line := piLineNamed(t, turnlog.ReleaseLine1)
	seed := diffSeed(t)
	eachRelease(t, line, func(t *testing.T, inst piInstall) { compareReasoningItems(t, line, inst, seed) })
}

// compareReasoningItems maps the removals of the reasoning items one
// release sends, on the same conversations for every release.
func compareReasoningItems(t *testing.T, line piLine, inst piInstall, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x0e1a1))
	const model = `"api":"openai-responses","provider":"openai","model":"gpt-5"`
	const other = `"api":"openai-responses","provider":"openai","model":"gpt-5-mini"`
	type conversation struct {
		events []string
		turn   int
	}
	var conversations []conversation
	items, calls := 0, 0
	// message is an assistant message of response in turn: reasoning, then
	// the given blocks.
	message := func(turn, response int, stop string, tail ...string) string {
		var blocks []string
		for range rng.IntN(3) {
			items++
			id := fmt.Sprintf("rs_%d", items)
			item := fmt.Sprintf(`{"type":"reasoning","id":%q,"summary":[{"type":"summary_text","text":"thought %s"}],"encrypted_content":"enc-%s"}`, id, id, id)
			blocks = append(blocks, fmt.Sprintf(`{"type":"thinking","thinking":"thought %s","thinkingSignature":%q}`, id, item))
		}
		who := model
		if rng.IntN(5) == 0 {
			who = other // another model's: its reasoning is not sent
		}
		return hostMessage(turn, response, fmt.Sprintf(`{"content":[%s],%s,"stopReason":%q}`, strings.Join(append(blocks, tail...), ","), who, stop))
	}
	for range 50 {
		c := conversation{events: []string{`{"type":"session/start","adapter":{"kind":"pi-ai",` + model + `}}`}}
		for c.turn = 1; c.turn <= 1+rng.IntN(6); c.turn++ {
			c.events = append(c.events, turnStart(c.turn), user(c.turn, fmt.Sprintf("q%d", c.turn)))
			response := 0
			if rng.IntN(2) == 0 {
				var toolCalls, results []string
				for range 1 + rng.IntN(2) {
					calls++
					// pi-ai's openai-responses tool-call id: the call id and the item id.
					id := fmt.Sprintf("call_%d|fc_%d", calls, calls)
					toolCalls = append(toolCalls, fmt.Sprintf(`{"type":"toolCall","id":%q,"name":"grep","arguments":{"pattern":"p%d"}}`, id, calls))
					results = append(results, toolResult(c.turn, id))
				}
				c.events = append(c.events, message(c.turn, response, "toolUse", toolCalls...))
				c.events = append(c.events, results...)
				response++
			}
			c.events = append(c.events, message(c.turn, response, "stop", fmt.Sprintf(`{"type":"text","text":"answer %d"}`, c.turn)), turnEnd(c.turn, "stop"))
		}
		conversations = append(conversations, c)
	}
	target := turnlog.Adapter{Kind: turnlog.EnvelopeKindPiAI, API: "openai-responses", Provider: "openai", Model: "gpt-5", ReleaseLine: line.name}
	var input []map[string]any
	for _, c := range conversations {
		res, err := replay.Transcript(turnlog.NewReader(strings.NewReader(seqLog(c.events...))).All(), replay.Options{Target: target, Through: replay.Head})
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]json.RawMessage, len(res.Messages))
		for i, m := range res.Messages {
			raw[i] = m.Message
		}
		input = append(input, map[string]any{"provider": "openai", "model": "gpt-5", "api": "openai-responses", "messages": raw})
	}
	in, err := json.Marshal(map[string]any{"requests": input})
	if err != nil {
		t.Fatal(err)
	}
	var pi struct {
		Results []struct {
			Error string `json:"error"`
			Input []struct {
				Type   string `json:"type"`
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"input"`
		} `json:"results"`
	}
	if err := json.Unmarshal(runNode(t, inst, "request.mjs", in), &pi); err != nil || len(pi.Results) != len(conversations) {
		t.Fatalf("request.mjs with pi-ai %s wrote %d results for %d requests (%v)", inst.version, len(pi.Results), len(conversations), err)
	}
	sent, mapped, afterCall := 0, 0, 0
	callStatus := map[string]int{} // function_call items by their status, for the log
	for i, c := range conversations {
		got := pi.Results[i]
		if got.Error != "" {
			t.Fatalf("conversation %d: pi-ai built no request: %s", i, got.Error)
		}
		// The next answer reports every reasoning item of the request removed.
		var removals []string
		called := false
		for _, item := range got.Input {
			switch item.Type {
			case "function_call":
				called = true
				status := item.Status
				if status == "" {
					status = "none"
				}
				callStatus[status]++
			case "reasoning":
				sent++
				if called {
					afterCall++
				}
				removals = append(removals, fmt.Sprintf(`{"type":"reasoning","id":%q,"action":"removed","reason":"prefix_mismatch"}`, item.ID))
			}
		}
		if len(removals) == 0 {
			continue
		}
		events := append(slices.Clone(c.events), turnStart(c.turn), user(c.turn, "next"), hostMessage(c.turn, 0, fmt.Sprintf(
			`{"content":[{"type":"text","text":"next"}],%s,"stopReason":"stop","diagnostics":[{"type":"openai_input_transformations","timestamp":1,"details":{"transformations":[%s]}}]}`,
			model, strings.Join(removals, ","))), turnEnd(c.turn, "stop"))
		var diags []replay.Diagnostic
		res, err := replay.Transcript(turnlog.NewReader(strings.NewReader(seqLog(events...))).All(), replay.Options{Target: target, Through: replay.Head,
			OnDiagnostic: func(d replay.Diagnostic) { diags = append(diags, d) }})
		if err != nil {
			t.Fatal(err)
		}
		for k, d := range diags {
			if d.Code != replay.CodeReplayStateRefused {
				t.Errorf("conversation %d: %s", i, d.Message)
				continue
			}
			// The block the diagnostic names holds the removed item.
			id := got.Input[0].ID
			n := 0
			for _, item := range got.Input {
				if item.Type == "reasoning" {
					if n == k {
						id = item.ID
					}
					n++
				}
			}
			var block int
			if _, err := fmt.Sscanf(d.Message, "thinking block %d", &block); err != nil {
				t.Fatalf("diagnostic %q", d.Message)
			}
			if sig := signatureAt(t, res.Messages, d.Seq, block); !strings.Contains(sig, strconv.Quote(id)) {
				t.Errorf("conversation %d: removal of %s mapped to block %d of seq %d, signed %s", i, id, block, d.Seq, sig)
				continue
			}
			mapped++
		}
	}
	if sent == 0 || mapped != sent {
		t.Errorf("pi-ai %s sent %d reasoning items; replay mapped %d removals of them to the block holding the item", inst.version, sent, mapped)
	}
	if afterCall == 0 {
		t.Errorf("pi-ai %s sent no reasoning item after a tool call: the cases no longer cover them", inst.version)
	}
	t.Logf("pi-ai %s: %d conversations (seed %d): sent %d reasoning items (%d after a tool call), each removal mapped to its block; function_call items by status: %v",
		inst.version, len(conversations), seed, sent, afterCall, callStatus)
}

// signatureAt is the thinking signature of block of the assistant message
// at seq in msgs.
func signatureAt(t *testing.T, msgs []replay.Message, seq int64, block int) string {
	t.Helper()
	for _, m := range msgs {
		if m.Seq != seq || m.Role != "assistant" {
			continue
		}
		var a turnlog.AssistantMessage
		if err := json.Unmarshal(m.Message, &a); err != nil {
			t.Fatal(err)
		}
		if block < len(a.Content) {
			return a.Content[block].ThinkingSignature
		}
	}
	return ""
}
