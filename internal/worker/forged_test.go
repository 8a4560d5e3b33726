package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"

	"github.com/turnlog/turnlog/internal/testutil/loggen"
)

// A checkpoint forged by someone who can write the bucket is not believed:
// it fails Check against the log's head, and a run starts over instead of
// resuming from it.
func TestForgedAssemblyCheckpoint(t *testing.T) {
	ctx := context.Background()
	log := newMemLog(t, testLog(t, "tool-call-without-result.jsonl")) // head: seq 22
	honest, err := Assemble(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	forged := `{"summary":{"task":"assemble","throughSeq":1000,"scannedThrough":1000,"turns":3,"lastTurnEnd":{"seq":1000,"turn":3,"reason":"stop"}},"next":1001,"committedTurns":3}`
	log.objects[derived.AssemblyCheckpointName] = []byte(forged)

	sum, found, err := derived.LoadAssembly(ctx, log)
	if err != nil || !found {
		t.Fatalf("LoadAssembly = %v, %v", found, err)
	}
	if err := sum.Check(22); err == nil || !strings.Contains(err.Error(), "head is seq 22") || !strings.Contains(err.Error(), "throughSeq is 1000") {
		t.Fatalf("Check of a checkpoint through seq 1000 on a head of 22 = %v, want a refusal naming both", err)
	}
	again, err := Assemble(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	if again.ThroughSeq != honest.ThroughSeq || again.ScannedThrough != 22 || again.Turns != honest.Turns {
		t.Fatalf("assembly after a forged checkpoint = %+v, want it redone: %+v", again, honest)
	}
	if sum, _, _ := derived.LoadAssembly(ctx, log); sum.Check(22) != nil {
		t.Fatalf("the run left a checkpoint that fails Check: %v", sum.Check(22))
	}
}

func TestForgedReplayCheckpoint(t *testing.T) {
	ctx := context.Background()
	log := newMemLog(t, loggen.Log(200, 7))
	head, _ := log.Head(ctx)
	target := loggen.Adapter
	name := derived.ReplayCheckpointName(target)

	// 500 degraded messages listed: more than a run ever lists.
	var state derived.ReplayState
	state.Summary = derived.Summary{Task: derived.TaskReplay, ThroughSeq: head, Replay: &derived.ReplayCounts{Target: target, Foreign: 500, Degraded: 500}, NewTotal: 500}
	for i := range 500 {
		state.Summary.New = append(state.Summary.New, derived.Diagnostic{Seq: int64(i % int(head)), Cause: "kind", Message: "x"})
	}
	data, _ := json.Marshal(state)
	log.objects[name] = data
	sum, found, err := derived.LoadReplay(ctx, log, target)
	if err != nil || !found {
		t.Fatalf("LoadReplay = %v, %v", found, err)
	}
	if err := sum.Check(head); err == nil {
		t.Fatal("Check accepted a checkpoint listing 500 new diagnostics")
	}
	// Replay runs again from the start instead.
	rep, err := Replay(ctx, log, target)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Replay.Foreign+rep.Replay.Native == 500 || len(rep.New) > derived.MaxNewDiagnostics || rep.Check(head) != nil {
		t.Fatalf("replay after a forged checkpoint = %+v %+v: %v", rep, rep.Replay, rep.Check(head))
	}

	// A checkpoint larger than any real one is not even read whole.
	log.objects[name] = []byte(`{"summary":{"task":"replay","throughSeq":1,"replay":{"degradedSeqs":{"kind":[` + strings.Repeat("1,", 100_000) + `1]}}}}`)
	if _, _, err := derived.LoadReplay(ctx, log, target); !errors.Is(err, derived.ErrUnusable) {
		t.Fatalf("LoadReplay of a 200 KB checkpoint = %v, want ErrUnusable", err)
	}
	if rep2, err := Replay(ctx, log, target); err != nil || rep2.ThroughSeq != rep.ThroughSeq {
		t.Fatalf("replay after an oversized checkpoint = %+v, %v; want it redone through seq %d", rep2, err, rep.ThroughSeq)
	}
}

// Check bounds the refused blocks a checkpoint may claim: the lists the
// controller copies to status, and the reasons it counts.
func TestCheckBoundsRefusals(t *testing.T) {
	valid := func() derived.Summary {
		return derived.Summary{Task: derived.TaskReplay, ThroughSeq: 20, Replay: &derived.ReplayCounts{Native: 2,
			Refused: map[string]int64{"prefix_binding_mismatch": 3}, RefusedSeqs: map[string][]int64{"prefix_binding_mismatch": {3, 7}}}}
	}
	if err := valid().Check(20); err != nil {
		t.Fatalf("Check of a valid summary: %v", err)
	}
	for name, forge := range map[string]func(*derived.ReplayCounts){
		"more seqs than refusals": func(c *derived.ReplayCounts) { c.Refused["prefix_binding_mismatch"] = 1 },
		"a seq past the transcript": func(c *derived.ReplayCounts) {
			c.RefusedSeqs["prefix_binding_mismatch"] = []int64{3, 21}
		},
		"seqs of a reason not counted": func(c *derived.ReplayCounts) { c.RefusedSeqs["other"] = []int64{1} },
		"a negative count":             func(c *derived.ReplayCounts) { c.Refused["other"] = -1 },
		"too many seqs": func(c *derived.ReplayCounts) {
			c.Refused["prefix_binding_mismatch"] = 100
			for i := range derived.MaxSeqsPerCause {
				c.RefusedSeqs["prefix_binding_mismatch"] = append(c.RefusedSeqs["prefix_binding_mismatch"], int64(i))
			}
		},
		"too many reasons": func(c *derived.ReplayCounts) {
			for i := range 10 {
				c.Refused[fmt.Sprint("reason ", i)] = 1
			}
		},
	} {
		sum := valid()
		forge(sum.Replay)
		if err := sum.Check(20); err == nil {
			t.Errorf("%s: Check accepted %+v", name, sum.Replay)
		}
	}
}
