package controllers

import (
	"bytes"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/turnlog"
)

var _ = Describe("Refused replay state", Ordered, func() {
	m := localManager("refused")

	It("counts a block the provider refused in status and raises one ReplayStateRefused Event for it, not a degrade", func() {
		log := loggen.RefusedLog(3)
		_, _, err := m.sio.Import(ctx, m.ns, "refused", bytes.NewReader(logLines(log, 9)))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			s := getSession(m.ns, "refused")(g)
			g.Expect(s.Status.Replay).NotTo(BeNil())
			g.Expect(s.Status.Replay.ThroughSeq).To(Equal(int64(8)))
			g.Expect(s.Status.Replay.Refused).To(Equal(turnlogv1.RefusedCounts{PrefixBindingMismatch: 1}))
			g.Expect(s.Status.Replay.RefusedSeqs).To(Equal(turnlogv1.RefusedSeqs{PrefixBindingMismatch: []int64{3}}))
			g.Expect(s.Status.Replay.Native).To(Equal(int64(2)))
			g.Expect(s.Status.Replay.Degraded).To(BeZero())
		}).Should(Succeed())
		Eventually(sessionEvents(m.ns, "refused", turnlogv1.EventReplayStateRefused)).Should(ConsistOf(And(
			HaveField("Note", And(
				Equal("seq 3 for pi-ai anthropic-messages/anthropic/claude-opus-5: thinking block 0 of seq 3 kept, as pi keeps it: refused by anthropic (prefix_binding_mismatch) at messages.2.content.0, reported at seq 7"))),
			HaveField("Regarding.FieldPath", "log[3]"))))

		// The next answer reports the same block again: it is counted once.
		_, _, err = m.sio.Append(ctx, m.ns, "refused", bytes.NewReader(bytes.TrimPrefix(log, logLines(log, 9))))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			g.Expect(getSession(m.ns, "refused")(g).Status.Replay.ThroughSeq).To(Equal(int64(12)))
		}).Should(Succeed())
		Expect(getSession(m.ns, "refused")(Default).Status.Replay.Refused).To(Equal(turnlogv1.RefusedCounts{PrefixBindingMismatch: 1}))
		Consistently(sessionEvents(m.ns, "refused", turnlogv1.EventReplayStateRefused), "2s").Should(HaveLen(1))
		Expect(sessionEvents(m.ns, "refused", turnlogv1.EventReplayDegraded)(Default)).To(BeEmpty())
	})

	It("gives a fork's child that drops refused blocks the refusals through the cut, and a transcript without them", func() {
		Expect(k8sClient.Create(ctx, &turnlogv1.SessionFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: m.ns, Name: "dropping"},
			Spec: turnlogv1.SessionForkSpec{Source: turnlogv1.SessionReference{Name: "refused"}, AtSeq: "12",
				Target: turnlogv1.ForkTarget{RefusedBlocks: turnlog.RefusedBlocksDrop}},
		})).To(Succeed())
		Eventually(func(g Gomega) {
			s := getSession(m.ns, "dropping")(g)
			g.Expect(s.Spec.Adapter.RefusedBlocks).To(Equal(turnlog.RefusedBlocksDrop))
			g.Expect(s.Status.Replay).NotTo(BeNil())
			g.Expect(s.Status.Replay.ThroughSeq).To(Equal(int64(12)))
			// Every response through the cut was requested by pi with the
			// block kept: each report maps to seq 3's thinking, none is
			// left unmapped.
			g.Expect(s.Status.Replay.Refused).To(Equal(turnlogv1.RefusedCounts{PrefixBindingMismatch: 1, Dropped: 1}))
			g.Expect(s.Status.Replay.RefusedSeqs).To(Equal(turnlogv1.RefusedSeqs{PrefixBindingMismatch: []int64{3}}))
			g.Expect(s.Status.Replay.Degraded).To(BeZero())
		}).Should(Succeed())
		Eventually(sessionEvents(m.ns, "dropping", turnlogv1.EventReplayStateRefused)).Should(ConsistOf(
			HaveField("Note", HavePrefix("seq 3 for pi-ai anthropic-messages/anthropic/claude-opus-5: thinking block 0 of seq 3 left out of the transcript: refused by anthropic (prefix_binding_mismatch) at messages.2.content.0, reported at seq 7"))))

		tr, _, err := m.sio.Transcript(ctx, m.ns, "dropping", func(a turnlog.Adapter) turnlog.Adapter { return a })
		Expect(err).NotTo(HaveOccurred())
		var thinking []string
		for _, msg := range tr.Messages {
			if msg.Role != "assistant" {
				continue
			}
			var a turnlog.AssistantMessage
			Expect(a.UnmarshalJSON(msg.Message)).To(Succeed())
			for _, c := range a.Content {
				if c.Type == turnlog.BlockThinking {
					thinking = append(thinking, fmt.Sprintf("%d:%s", msg.Seq, c.ThinkingSignature))
				}
			}
			if msg.Seq == 3 {
				Expect(msg.DroppedBlocks).To(Equal([]int{0}))
			}
		}
		// Seq 3's refused block is left out; every other signed block is kept.
		Expect(thinking).To(Equal([]string{"7:sig2", "11:sig3"}))

		// The source keeps replaying as pi does.
		Expect(getSession(m.ns, "refused")(Default).Status.Replay.Refused.Dropped).To(BeZero())
		Expect(getSession(m.ns, "dropping")(Default).Spec.ForkedFrom.SentKeptThrough).To(BeNil(), "its source sent every block")
	})

	It("tells a fork of a Session that drops refused blocks how far its source's hosts sent them", func() {
		Expect(k8sClient.Create(ctx, &turnlogv1.SessionFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: m.ns, Name: "dropping-again"},
			Spec:       turnlogv1.SessionForkSpec{Source: turnlogv1.SessionReference{Name: "dropping"}, AtSeq: "12"},
		})).To(Succeed())
		Eventually(func(g Gomega) {
			s := getSession(m.ns, "dropping-again")(g)
			g.Expect(s.Spec.ForkedFrom).NotTo(BeNil())
			// "dropping" requested nothing itself; what it holds through
			// seq 12, its own source requested with every block kept.
			g.Expect(s.Spec.ForkedFrom.SentKeptThrough).To(HaveValue(Equal(int64(12))))
			g.Expect(s.Status.Replay).NotTo(BeNil())
			g.Expect(s.Status.Replay.ThroughSeq).To(Equal(int64(12)))
			g.Expect(s.Status.Replay.Refused).To(Equal(turnlogv1.RefusedCounts{PrefixBindingMismatch: 1, Dropped: 1}))
		}).Should(Succeed())
	})
})
