package controllers

import (
	"bytes"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// compactedLog: a system prompt, three turns, a compaction after the third
// that keeps the third turn, then a fourth turn and a system prompt change.
func compactedLog() []byte {
	ev := []string{
		`"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}`,
		`"type":"system/message","content":"You are a support agent."`,
	}
	for turn := 1; turn <= 3; turn++ {
		ev = append(ev,
			fmt.Sprintf(`"type":"turn/start","turn":%d`, turn),
			fmt.Sprintf(`"type":"user/message","turn":%d,"content":"question %d"`, turn, turn),
			fmt.Sprintf(`"type":"assistant/message","turn":%d,"response":0,"message":{"content":[{"type":"text","text":"answer %d"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop"}`, turn, turn),
			fmt.Sprintf(`"type":"turn/end","turn":%d,"reason":"stop"`, turn))
	}
	// seq 14: the compaction keeps from turn 3's user message (seq 11).
	ev = append(ev,
		`"type":"context/compaction","content":[{"type":"text","text":"Two questions were answered."}],"firstKeptSeq":11,"tokensBefore":4000,"systemMessage":{"content":"You are a support agent."}`,
		`"type":"turn/start","turn":4`, `"type":"user/message","turn":4,"content":"question 4"`,
		`"type":"assistant/message","turn":4,"response":0,"message":{"content":[{"type":"text","text":"answer 4"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop"}`,
		`"type":"turn/end","turn":4,"reason":"stop"`,                      // 18
		`"type":"system/message","content":"Escalate billing questions."`, // 19
		`"type":"turn/start","turn":5`, `"type":"user/message","turn":5,"content":"question 5"`,
		`"type":"assistant/message","turn":5,"response":0,"message":{"content":[{"type":"text","text":"answer 5"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop"}`,
		`"type":"turn/end","turn":5,"reason":"stop"`, // 23
	)
	var b bytes.Buffer
	for seq, e := range ev {
		fmt.Fprintf(&b, `{"seq":%d,%s}`+"\n", seq, e)
	}
	return b.Bytes()
}

var _ = Describe("Long sessions", Ordered, func() {
	m := localManager("context")

	roles := func(name string) string {
		tr, _, err := m.sio.Transcript(ctx, m.ns, name, func(a turnlog.Adapter) turnlog.Adapter { return a })
		Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, m := range tr.Messages {
			s := fmt.Sprintf("%d:%s", m.Seq, m.Role)
			if m.Origin != "" {
				s += "/" + m.Origin
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}

	It("applies a compaction written after a turn before the next turn starts, in status and with an Event", func() {
		log := compactedLog()
		_, _, err := m.sio.Import(ctx, m.ns, "long", bytes.NewReader(logLines(log, 15))) // through the compaction
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			s := getSession(m.ns, "long")(g)
			g.Expect(s.Status.Replay).NotTo(BeNil())
			g.Expect(s.Status.Replay.ThroughSeq).To(Equal(int64(14)))
			g.Expect(s.Status.Replay.LastCompactionSeq).To(Equal(ptrTo(int64(14))))
			g.Expect(s.Status.Replay.ContextMessages).To(Equal(int64(4)))
			g.Expect(s.Status.Replay.Compactions).To(Equal(int64(1)))
		}).Should(Succeed())
		Expect(roles("long")).To(Equal("14:system/compaction 14:user/compaction 11:user 12:assistant"))
		Eventually(sessionEvents(m.ns, "long", turnlogv1.EventContextCompacted)).Should(HaveLen(1))
		e := sessionEvents(m.ns, "long", turnlogv1.EventContextCompacted)(Default)[0]
		Expect(e.Note).To(Equal("compaction at seq 14 replayed (1 in this run): the transcript now holds 4 messages"))

		_, _, err = m.sio.Append(ctx, m.ns, "long", bytes.NewReader(bytes.TrimPrefix(log, logLines(log, 15))))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			g.Expect(getSession(m.ns, "long")(g).Status.Replay.ThroughSeq).To(Equal(int64(23)))
		}).Should(Succeed())
		Expect(roles("long")).To(Equal("14:system/compaction 14:user/compaction 11:user 12:assistant 16:user 17:assistant 19:system 21:user 22:assistant"))
		Expect(getSession(m.ns, "long")(Default).Status.Replay.ContextMessages).To(Equal(int64(9)))
	})

	It("reports a context edit it cannot apply in its own status field and Event, not as a degraded message", func() {
		log := append(logLines(compactedLog(), 10), []byte(`{"seq":10,"type":"context/edit","targetSeq":4,"replacement":{"content":[1]}}`+"\n")...)
		_, _, err := m.sio.Import(ctx, m.ns, "bad-edit", bytes.NewReader(log))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			s := getSession(m.ns, "bad-edit")(g)
			g.Expect(s.Status.Replay).NotTo(BeNil())
			g.Expect(s.Status.Replay.ThroughSeq).To(Equal(int64(10)))
			g.Expect(s.Status.Replay.ContextEventsNotApplied).To(Equal(int64(1)))
			g.Expect(s.Status.Replay.ContextEventSeqs).To(Equal([]int64{10}))
			g.Expect(s.Status.Replay.Degraded).To(BeZero())
			g.Expect(s.Status.Replay.DegradedSeqs).To(BeZero())
		}).Should(Succeed())
		Expect(roles("bad-edit")).To(Equal("1:system 3:user 4:assistant 7:user 8:assistant"))
		Eventually(sessionEvents(m.ns, "bad-edit", turnlogv1.EventContextEventNotApplied)).Should(ConsistOf(
			HaveField("Note", And(HavePrefix("context event at seq 10 not applied for pi-ai anthropic-messages/anthropic/claude-sonnet-4-5: the edit of seq 4 cannot be applied: "),
				HaveSuffix("; seq 4 is replayed as it was")))))
		Consistently(sessionEvents(m.ns, "bad-edit", turnlogv1.EventReplayDegraded), "2s").Should(BeEmpty())
	})

	It("forks before a compaction into an uncompacted child, and after it into a compacted one with the system prompt in force", func() {
		for _, tt := range []struct{ name, at, want string }{
			{"long-before", "10", "1:system 3:user 4:assistant 7:user 8:assistant 11:user 12:assistant"},
			{"long-at", "14", "14:system/compaction 14:user/compaction 11:user 12:assistant 16:user 17:assistant"},
			{"long-after", "16.1", "14:system/compaction 14:user/compaction 11:user 12:assistant 16:user 17:assistant"},
			{"long-prompt", "21", "14:system/compaction 14:user/compaction 11:user 12:assistant 16:user 17:assistant 19:system 21:user 22:assistant"},
		} {
			Expect(k8sClient.Create(ctx, newFork(m.ns, tt.name, "long", tt.at))).To(Succeed())
			Eventually(func(g Gomega) {
				f := getFork(m.ns, tt.name)(g)
				g.Expect(cond(f.Status.Conditions, turnlogv1.ConditionSucceeded)).To(Equal("True/Forked"))
			}).Should(Succeed())
			waitReady(m.ns, tt.name)
			Eventually(func(g Gomega) {
				g.Expect(getSession(m.ns, tt.name)(g).Status.Replay).NotTo(BeNil())
			}).Should(Succeed())
			Expect(roles(tt.name)).To(Equal(tt.want), tt.name)
		}
		Expect(replay.OriginCompaction).To(Equal("compaction"))
	})
})

func ptrTo[T any](v T) *T { return &v }
