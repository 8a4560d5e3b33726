package replay_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// signedAnswer is an assistant message of the session's model: signed
// thinking, then text; extra are more members (JSON, with a leading comma).
func signedAnswer(thought, answer, extra string) string {
	return fmt.Sprintf(`{"content":[{"type":"thinking","thinking":%q,"thinkingSignature":"sig-%s"},{"type":"text","text":%q}],%s,"stopReason":"stop"%s}`,
		thought, thought, answer, sameModel, extra)
}

// report is the diagnostics member pi-ai 1.6 records for Anthropic's
// input_transformations: entries are type, path, reason triples.
func report(entries ...[3]string) string {
	var ts []string
	for _, e := range entries {
		ts = append(ts, fmt.Sprintf(`{"type":%q,"path":%q,"reason":%q}`, e[0], e[1], e[2]))
	}
	return `,"diagnostics":[{"type":"retry","attempt":1},{"type":"anthropic_input_transformations","timestamp":1,"details":{"transformations":[` + strings.Join(ts, ",") + `]}}]`
}

const effort = `,"providerThinkingLevel":"high"`

// refusalLog is two turns: the first answers with signed thinking (seq 3),
// the second's answer (seq 7) carries extra; more turns follow, each
// answered with more.
func refusalLog(first, extra string, more ...string) string {
	events := []string{sessionStart,
		turnStart(1), user(1, "q1"), hostMessage(1, 0, signedAnswer("t1", "a1", first)), turnEnd(1, "stop"),
		turnStart(2), user(2, "q2"), hostMessage(2, 0, signedAnswer("t2", "a2", extra)), turnEnd(2, "stop")}
	for i, m := range more {
		n := 3 + i
		events = append(events, turnStart(n), user(n, fmt.Sprintf("q%d", n)), hostMessage(n, 0, m), turnEnd(n, "stop"))
	}
	return seqLog(events...)
}

func TestRefusedBlocksAreReported(t *testing.T) {
	const prefix, model = "prefix_binding_mismatch", "model_binding_mismatch"
	dropped := func(path, reason string) [3]string { return [3]string{"thinking_dropped", path, reason} }
	for _, tc := range []struct {
		name string
		log  string
		want []string // code seq cause
	}{
		{"a dropped block maps to its message and block",
			refusalLog("", report(dropped("messages.1.content.0", prefix))),
			[]string{"REPLAY_STATE_REFUSED 3 " + prefix}},
		{"a block kept despite a mismatch is not refused",
			refusalLog("", report([3]string{"thinking_mismatch_allowed", "messages.1.content.0", prefix})),
			nil},
		{"no report, no diagnostic", refusalLog("", ""), nil},
		{"managed effort: effort system messages before the message and at the end",
			refusalLog(effort, effort+report(dropped("messages.2.content.0", model))),
			[]string{"REPLAY_STATE_REFUSED 3 " + model}},
		{"managed effort: an effort system message refuses nothing",
			refusalLog(effort, effort+report(dropped("messages.1.content.0", prefix))),
			[]string{"REPLAY_STATE_REFUSAL_UNMAPPED 7 unmapped"}},
		{"a path to a text block is not mapped",
			refusalLog("", report(dropped("messages.1.content.1", prefix))),
			[]string{"REPLAY_STATE_REFUSAL_UNMAPPED 7 unmapped"}},
		{"a path past the request is not mapped",
			refusalLog("", report(dropped("messages.7.content.0", prefix), dropped("messages.1", prefix), dropped("messages.1.content.0", prefix))),
			[]string{"REPLAY_STATE_REFUSAL_UNMAPPED 7 unmapped", "REPLAY_STATE_REFUSAL_UNMAPPED 7 unmapped", "REPLAY_STATE_REFUSED 3 " + prefix}},
		{"a block reported again by a later response is reported once",
			refusalLog("", report(dropped("messages.1.content.0", prefix)),
				signedAnswer("t3", "a3", report(dropped("messages.1.content.0", prefix), dropped("messages.3.content.0", prefix)))),
			[]string{"REPLAY_STATE_REFUSED 3 " + prefix, "REPLAY_STATE_REFUSED 7 " + prefix}},
		{"another model's response is not read",
			refusalLog("", "", strings.Replace(signedAnswer("t3", "a3", report(dropped("messages.1.content.0", prefix))), `"model":"claude"`, `"model":"other"`, 1)),
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, diags := run(t, tc.log, replay.Options{})
			var got []string
			for _, d := range diags {
				got = append(got, fmt.Sprintf("%s %d %s", d.Code, d.Seq, d.Cause))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("diagnostics %q, want %q (%+v)", got, tc.want, diags)
			}
			// pi does not stop sending them: the transcript keeps the blocks.
			if c := content(t, res.Messages[1]); !strings.Contains(c, "sig-t1") || res.Counts.Degraded != 0 {
				t.Errorf("the refused message replays as %s, %d degraded; want it kept native", c, res.Counts.Degraded)
			}
		})
	}
}

func TestRefusalMessageNamesBlockReasonProviderPathAndResponse(t *testing.T) {
	_, diags := run(t, refusalLog("", report([3]string{"thinking_dropped", "messages.1.content.0", "prefix_binding_mismatch"})), replay.Options{})
	if len(diags) != 1 {
		t.Fatalf("diagnostics %+v, want one", diags)
	}
	for _, want := range []string{"block 0 of seq 3", "anthropic", "prefix_binding_mismatch", "messages.1.content.0", "reported at seq 7"} {
		if !strings.Contains(diags[0].Message, want) {
			t.Errorf("message %q does not name %q", diags[0].Message, want)
		}
	}
}

// A replay resumed at a turn boundary maps a refusal with the stored
// transcript, and remembers the refusals it reported (ContextState).
func TestResumedReplayMapsRefusals(t *testing.T) {
	again := signedAnswer("t3", "a3", report([3]string{"thinking_dropped", "messages.1.content.0", "prefix_binding_mismatch"}))
	log := refusalLog("", report([3]string{"thinking_dropped", "messages.1.content.0", "prefix_binding_mismatch"}), again)
	events := readAll(t, log)
	first := replay.NewBuilder(replay.Options{Through: replay.Head})
	for i := range events[:5] {
		first.Add(&events[i])
	}
	stored, open := first.Checkpoint()

	resume := func(from, to int, ctx replay.ContextState) ([]replay.Diagnostic, replay.Result, replay.ContextState, int) {
		var diags []replay.Diagnostic
		reads := 0
		// A resumed replay sees no session/start: the worker names the target.
		target := turnlog.Adapter{Kind: turnlog.EnvelopeKindPiAI, API: "anthropic-messages", Provider: "anthropic", Model: "claude"}
		b := replay.NewBuilder(replay.Options{Target: target, Through: replay.Head, Open: open, Context: ctx,
			Prior: func() ([]replay.Message, error) {
				reads++
				return stored.Messages, nil
			},
			OnDiagnostic: func(d replay.Diagnostic) { diags = append(diags, d) }})
		for i := from; i < to; i++ {
			b.Add(&events[i])
		}
		res, _ := b.Checkpoint()
		return diags, res, b.ContextState(), reads
	}
	diags, res, ctx, reads := resume(5, 9, first.ContextState())
	if len(diags) != 1 || diags[0].Code != replay.CodeReplayStateRefused || diags[0].Seq != 3 {
		t.Fatalf("resumed replay reported %+v, want the refusal of seq 3", diags)
	}
	if res.Rebuilt || reads != 1 || len(ctx.Refused) != 1 {
		t.Errorf("rebuilt %v, stored transcript read %d times, %d refusals remembered; want not rebuilt, read once, one", res.Rebuilt, reads, len(ctx.Refused))
	}
	// The next replay resumes with what this one remembered: the block
	// reported again is not reported anew.
	if diags, _, _, _ := resume(9, len(events), ctx); len(diags) != 0 {
		t.Errorf("a refusal reported again after a resume: %+v", diags)
	}
}

// After a compaction the request is laid out from the compacted transcript,
// which replay encodes anew: the layout of the longer transcript before it
// is not reused.
func TestRefusalAfterACompaction(t *testing.T) {
	dropped := report([3]string{"thinking_dropped", "messages.2.content.0", "prefix_binding_mismatch"})
	log := seqLog(sessionStart,
		turnStart(1), user(1, "q1"), hostMessage(1, 0, signedAnswer("t1", "a1", dropped)), turnEnd(1, "stop"),
		turnStart(2), user(2, "q2"), hostMessage(2, 0, signedAnswer("t2", "a2", report([3]string{"thinking_dropped", "messages.1.content.0", "prefix_binding_mismatch"}))), turnEnd(2, "stop"),
		`{"type":"context/compaction","content":[{"type":"text","text":"Earlier: q1."}],"firstKeptSeq":6,"tokensBefore":100}`, // 9
		turnStart(3), user(3, "q3"), hostMessage(3, 0, signedAnswer("t3", "a3", dropped)), turnEnd(3, "stop"))
	res, diags := run(t, log, replay.Options{})
	if got := summary(res); got != "9:user 6:user 7:assistant/native 11:user 12:assistant/native" {
		t.Fatalf("transcript %s", got)
	}
	var got []string
	for _, d := range diags {
		got = append(got, fmt.Sprintf("%s %d", d.Code, d.Seq))
	}
	// Turn 1's report names a path past its request; turn 2's is seq 3's
	// thinking; turn 3's, after the compaction, seq 7's.
	if want := []string{"REPLAY_STATE_REFUSAL_UNMAPPED 3", "REPLAY_STATE_REFUSED 3", "REPLAY_STATE_REFUSED 7"}; !slices.Equal(got, want) {
		t.Errorf("diagnostics %q, want %q", got, want)
	}
}

// dropTarget is the session's model, dropping refused blocks.
var dropTarget = turnlog.Adapter{RefusedBlocks: turnlog.RefusedBlocksDrop}

// twoThoughts answers with two signed thinking blocks, then text.
func twoThoughts(thought, answer, extra string) string {
	return fmt.Sprintf(`{"content":[{"type":"thinking","thinking":%q,"thinkingSignature":"sig-%s"},{"type":"thinking","thinking":"%s-b","thinkingSignature":"sig-%s-b"},{"type":"text","text":%q}],%s,"stopReason":"stop"%s}`,
		thought, thought, thought, thought, answer, sameModel, extra)
}

func TestDroppedRefusedBlocks(t *testing.T) {
	const prefix = "prefix_binding_mismatch"
	dropped := func(path string) string { return report([3]string{"thinking_dropped", path, prefix}) }
	// Seq 3 has two signed thoughts; turn 2's response (seq 7) reports the
	// first refused; turn 3's (seq 11) reports messages.1.content.0 again:
	// seq 3's first thought in a request that kept it, its second in one
	// built from the transcript without it.
	log := seqLog(sessionStart,
		turnStart(1), user(1, "q1"), hostMessage(1, 0, twoThoughts("t1", "a1", "")), turnEnd(1, "stop"),
		turnStart(2), user(2, "q2"), hostMessage(2, 0, signedAnswer("t2", "a2", dropped("messages.1.content.0"))), turnEnd(2, "stop"),
		turnStart(3), user(3, "q3"), hostMessage(3, 0, signedAnswer("t3", "a3", dropped("messages.1.content.0"))), turnEnd(3, "stop"))
	for _, tc := range []struct {
		name     string
		opts     replay.Options
		want     []string // seq: content of each assistant message
		dropped  [][]int  // DroppedBlocks of each assistant message
		diagnose []string
	}{
		{"kept, as pi keeps them", replay.Options{},
			[]string{"t1 t1-b a1", "t2 a2", "t3 a3"}, [][]int{nil, nil, nil},
			[]string{"3 block 0 of seq 3 kept, as pi keeps it"}},
		{"dropped: the host sent the transcript without the dropped block", replay.Options{Target: dropTarget},
			[]string{"a1", "t2 a2", "t3 a3"}, [][]int{{0, 1}, nil, nil},
			[]string{"3 block 0 of seq 3 left out of the transcript", "3 block 1 of seq 3 left out of the transcript"}},
		{"dropped, requested with every block kept through a fork's cut", replay.Options{Target: dropTarget, SentKeptThrough: 12},
			[]string{"t1-b a1", "t2 a2", "t3 a3"}, [][]int{{0}, nil, nil},
			[]string{"3 block 0 of seq 3 left out of the transcript"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, diags := run(t, log, tc.opts)
			var got []string
			var gotDropped [][]int
			for _, m := range res.Messages {
				if m.Role != "assistant" {
					continue
				}
				var a turnlog.AssistantMessage
				if err := a.UnmarshalJSON(m.Message); err != nil {
					t.Fatal(err)
				}
				var words []string
				for _, c := range a.Content {
					words = append(words, c.Thinking+c.Text)
					// every block kept keeps its signature
					if c.Type == turnlog.BlockThinking && c.ThinkingSignature != "sig-"+c.Thinking {
						t.Errorf("seq %d block %q signed %q", m.Seq, c.Thinking, c.ThinkingSignature)
					}
				}
				got = append(got, strings.Join(words, " "))
				gotDropped = append(gotDropped, m.DroppedBlocks)
				if m.Replay != replay.Native {
					t.Errorf("seq %d replays %s, want native: its other blocks are still usable", m.Seq, m.Replay)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("assistant messages %q, want %q", got, tc.want)
			}
			if fmt.Sprint(gotDropped) != fmt.Sprint(tc.dropped) {
				t.Errorf("droppedBlocks %v, want %v", gotDropped, tc.dropped)
			}
			var gotDiags []string
			for _, d := range diags {
				head, _, _ := strings.Cut(d.Message, ":")
				gotDiags = append(gotDiags, fmt.Sprintf("%d %s", d.Seq, strings.TrimPrefix(head, "thinking ")))
			}
			if !slices.Equal(gotDiags, tc.diagnose) {
				t.Errorf("diagnostics %q, want %q", gotDiags, tc.diagnose)
			}
			if res.Counts.Degraded != 0 {
				t.Errorf("%d messages degraded, want none: a dropped block is not a degraded message", res.Counts.Degraded)
			}
		})
	}
}

// A block left out stays out when the context is built again from the log
// (a compaction reaching back, an edit), and across a resumed replay; an
// edit of the message sends its new content whole.
func TestDroppedBlocksStayDropped(t *testing.T) {
	refuse := report([3]string{"thinking_dropped", "messages.1.content.0", "prefix_binding_mismatch"})
	base := []string{sessionStart,
		turnStart(1), user(1, "q1"), hostMessage(1, 0, twoThoughts("t1", "a1", "")), turnEnd(1, "stop"), // 3
		turnStart(2), user(2, "q2"), hostMessage(2, 0, signedAnswer("t2", "a2", refuse)), turnEnd(2, "stop"), // 7
		`{"type":"context/compaction","content":[{"type":"text","text":"Earlier."}],"firstKeptSeq":6,"tokensBefore":100}`, // 9
	}
	firstMessage := func(t *testing.T, res replay.Result, seq int64) string {
		t.Helper()
		for _, m := range res.Messages {
			if m.Seq == seq && m.Role == "assistant" {
				return content(t, m)
			}
		}
		return "(not in the transcript)"
	}
	t.Run("a compaction reaching back", func(t *testing.T) {
		log := seqLog(append(slices.Clone(base),
			`{"type":"context/compaction","content":[{"type":"text","text":"All."}],"firstKeptSeq":2,"tokensBefore":100}`)...) // 10
		res, _ := run(t, log, replay.Options{Target: dropTarget, Reread: replay.RereadBytes([]byte(log))})
		if c := firstMessage(t, res, 3); strings.Contains(c, `"t1"`) || !strings.Contains(c, "t1-b") {
			t.Errorf("seq 3 after the context was read again: %s; want its refused block still left out", c)
		}
	})
	t.Run("an edit of the message", func(t *testing.T) {
		log := seqLog(sessionStart,
			turnStart(1), user(1, "q1"), hostMessage(1, 0, twoThoughts("t1", "a1", "")), turnEnd(1, "stop"),
			turnStart(2), user(2, "q2"), hostMessage(2, 0, signedAnswer("t2", "a2", refuse)), turnEnd(2, "stop"),
			`{"type":"context/edit","targetSeq":3,"replacement":{"content":"a1, shorter"}}`)
		res, _ := run(t, log, replay.Options{Target: dropTarget, Reread: replay.RereadBytes([]byte(log))})
		for _, m := range res.Messages {
			if m.Seq == 3 && len(m.DroppedBlocks) > 0 {
				t.Errorf("the edited message still says blocks %v were left out", m.DroppedBlocks)
			}
		}
		if c := firstMessage(t, res, 3); !strings.Contains(c, "a1, shorter") {
			t.Errorf("seq 3 after its edit: %s", c)
		}
	})
	t.Run("a resumed replay", func(t *testing.T) {
		log := seqLog(append(base[:len(base)-1],
			turnStart(3), user(3, "q3"), hostMessage(3, 0, signedAnswer("t3", "a3", "")), turnEnd(3, "stop"))...)
		events := readAll(t, log)
		first := replay.NewBuilder(replay.Options{Target: dropTarget, Through: replay.Head})
		for i := range events[:9] {
			first.Add(&events[i])
		}
		stored, open := first.Checkpoint()
		if c := firstMessage(t, stored, 3); strings.Contains(c, `"t1"`) {
			t.Fatalf("seq 3 as stored: %s; want its refused block left out", c)
		}
		target := turnlog.Adapter{Kind: turnlog.EnvelopeKindPiAI, API: "anthropic-messages", Provider: "anthropic", Model: "claude",
			RefusedBlocks: turnlog.RefusedBlocksDrop}
		b := replay.NewBuilder(replay.Options{Target: target, Through: replay.Head, Open: open, Context: first.ContextState(),
			Prior: func() ([]replay.Message, error) { return stored.Messages, nil }})
		for i := 9; i < len(events); i++ {
			b.Add(&events[i])
		}
		if ctx := b.ContextState(); len(ctx.Dropped) != 1 || ctx.Dropped[0] != (replay.BlockRef{Seq: 3, Block: 0}) {
			t.Errorf("context state %+v, want seq 3's block 0 dropped", ctx)
		}
	})
}

// OpenAI's Responses API names a withheld reasoning item by its id, which
// pi-ai sends from the thinking block's signature.
func TestOpenAIReasoningRemovals(t *testing.T) {
	const model = `"api":"openai-responses","provider":"openai","model":"gpt-6.2"`
	start := `{"type":"session/start","adapter":{"kind":"pi-ai",` + model + `}}`
	reasoning := func(id, text string) string {
		item := fmt.Sprintf(`{"type":"reasoning","id":%q,"summary":[{"type":"summary_text","text":%q}],"encrypted_content":"enc-%s"}`, id, text, id)
		return fmt.Sprintf(`{"type":"thinking","thinking":%q,"thinkingSignature":%q}`, text, item)
	}
	answer := func(blocks, extra string) string {
		return fmt.Sprintf(`{"content":[%s],%s,"stopReason":"stop"%s}`, blocks, model, extra)
	}
	removed := func(entries ...string) string {
		return `,"diagnostics":[{"type":"openai_input_transformations","timestamp":1,"details":{"transformations":[` + strings.Join(entries, ",") + `]}}]`
	}
	log := seqLog(start,
		turnStart(1), user(1, "q1"), hostMessage(1, 0, answer(reasoning("rs_1", "t1")+`,`+reasoning("rs_2", "t2")+`,{"type":"text","text":"a1"}`, "")), turnEnd(1, "stop"),
		turnStart(2), user(2, "q2"), hostMessage(2, 0, answer(`{"type":"text","text":"a2"}`, removed(
			`{"type":"reasoning","id":"rs_2","action":"removed","reason":"prefix_mismatch"}`,
			`{"type":"reasoning","id":"rs_9","action":"removed","reason":"model_mismatch"}`,
			`{"type":"reasoning","id":"rs_1","action":"kept","reason":"prefix_mismatch"}`))), turnEnd(2, "stop"))
	for _, tc := range []struct {
		name   string
		opts   replay.Options
		diags  []string
		thinks string
	}{
		{"kept", replay.Options{},
			[]string{"REPLAY_STATE_REFUSED 3 prefix_binding_mismatch thinking block 1 of seq 3 kept, as pi keeps it: refused by openai (prefix_mismatch) as reasoning item rs_2, reported at seq 7",
				"REPLAY_STATE_REFUSAL_UNMAPPED 7 unmapped reasoning item rs_9 removed by openai (model_mismatch), reported at seq 7, not mapped: no thinking block of the transcript holds that item"},
			"t1 t2"},
		{"dropped", replay.Options{Target: dropTarget},
			[]string{"REPLAY_STATE_REFUSED 3 prefix_binding_mismatch thinking block 1 of seq 3 left out of the transcript: refused by openai (prefix_mismatch) as reasoning item rs_2, reported at seq 7",
				"REPLAY_STATE_REFUSAL_UNMAPPED 7 unmapped reasoning item rs_9 removed by openai (model_mismatch), reported at seq 7, not mapped: no thinking block of the transcript holds that item"},
			"t1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, diags := run(t, log, tc.opts)
			var got []string
			for _, d := range diags {
				got = append(got, fmt.Sprintf("%s %d %s %s", d.Code, d.Seq, d.Cause, d.Message))
			}
			if !slices.Equal(got, tc.diags) {
				t.Errorf("diagnostics\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.diags, "\n"))
			}
			var a turnlog.AssistantMessage
			if err := a.UnmarshalJSON(res.Messages[1].Message); err != nil {
				t.Fatal(err)
			}
			var thinks []string
			for _, c := range a.Content {
				if c.Type == turnlog.BlockThinking {
					thinks = append(thinks, c.Thinking)
				}
			}
			if strings.Join(thinks, " ") != tc.thinks {
				t.Errorf("seq 3 sends thinking %q, want %q", thinks, tc.thinks)
			}
		})
	}
}
