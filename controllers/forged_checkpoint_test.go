package controllers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
)

// Checkpoints sit beside the log, where anyone who can write the bucket
// can forge them: the manager believes one only if it fits the log, and
// bounds the Events it raises whatever a checkpoint says.
var _ = Describe("Forged checkpoints", Ordered, func() {
	m := localManager("forged")

	// forge replaces the Session's derived object whose key ends in suffix,
	// then appends an empty turn: a Session whose log has not grown is not
	// read again (session_poll.go).
	forge := func(name, suffix string, data []byte, next, turn int64) {
		GinkgoHelper()
		s := getSession(m.ns, name)(Default)
		bucket, err := m.stores.buckets.Bucket(ctx, "mem://")
		Expect(err).NotTo(HaveOccurred())
		root, err := sessionlog.Location{Namespace: s.Namespace, Session: s.Name, UID: string(s.UID)}.Root()
		Expect(err).NotTo(HaveOccurred())
		var key string
		for o, err := range bucket.List(ctx, root+"derived/") {
			Expect(err).NotTo(HaveOccurred())
			if strings.HasSuffix(o.Key, suffix) {
				key = o.Key
			}
		}
		Expect(key).NotTo(BeEmpty(), "no derived object ending in %s", suffix)
		Expect(bucket.Put(ctx, key, data, nil)).To(Succeed())
		_, _, err = m.sio.Append(ctx, m.ns, name, strings.NewReader(fmt.Sprintf(
			`{"seq":%d,"type":"turn/start","turn":%d}`+"\n"+`{"seq":%d,"type":"turn/end","turn":%d,"reason":"stop"}`+"\n", next, turn, next+1, turn)))
		Expect(err).NotTo(HaveOccurred())
	}

	It("ignores an assembly checkpoint past the log's head, and assembles again", func() {
		_, _, err := m.sio.Import(ctx, m.ns, "past-head", bytes.NewReader(readLog("tool-call-without-result.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		waitReady(m.ns, "past-head")

		forge("past-head", "assembly/checkpoint.json", []byte(
			`{"summary":{"task":"assemble","throughSeq":1000,"scannedThrough":1000,"turns":3,"lastTurnEnd":{"seq":1000,"turn":3,"reason":"stop"}},"next":1001,"committedTurns":3}`), 23, 3)
		Eventually(sessionEvents(m.ns, "past-head", turnlogv1.EventCheckpointRejected)).Should(ContainElement(
			HaveField("Note", ContainSubstring("assemble checkpoint does not fit a log whose head is seq 24: throughSeq is 1000"))))
		Consistently(func(g Gomega) {
			s := getSession(m.ns, "past-head")(g)
			g.Expect(*s.Status.AssembledThroughSeq).To(BeNumerically("<=", 24))
		}, "2s").Should(Succeed())
		s := waitReady(m.ns, "past-head")
		Expect(*s.Status.AssembledThroughSeq).To(Equal(int64(24)))
	})

	It("raises at most 10 ReplayDegraded Events and one summary for a checkpoint listing 2,000", func() {
		_, _, err := m.sio.Import(ctx, m.ns, "flood", bytes.NewReader(degradedLog(3)))
		Expect(err).NotTo(HaveOccurred())
		waitReady(m.ns, "flood")
		Eventually(sessionEvents(m.ns, "flood", turnlogv1.EventReplayDegraded)).Should(HaveLen(3))

		sum := derived.Summary{Task: derived.TaskReplay, ThroughSeq: 12, NewTotal: 2000,
			Replay: &derived.ReplayCounts{Foreign: 3, Degraded: 3}}
		for i := range 2000 {
			sum.New = append(sum.New, derived.Diagnostic{Seq: int64(i % 12), Cause: "kind", Message: fmt.Sprintf("forged %d", i)})
		}
		data, err := json.Marshal(map[string]any{"summary": sum, "next": 13})
		Expect(err).NotTo(HaveOccurred())
		forge("flood", "/checkpoint.json", data, 13, 4) // the replay checkpoint sorts after assembly's
		Eventually(sessionEvents(m.ns, "flood", turnlogv1.EventCheckpointRejected)).ShouldNot(BeEmpty())
		Consistently(func(g Gomega) {
			g.Expect(len(sessionEvents(m.ns, "flood", turnlogv1.EventReplayDegraded)(g))).To(BeNumerically("<=", 3+derived.MaxNewDiagnostics+1))
		}, "3s").Should(Succeed())
		s := waitReady(m.ns, "flood")
		Expect(s.Status.Replay.Degraded).To(Equal(int64(3)))
	})
})

var _ = Describe("Event bounds", func() {
	It("lists at most derived.MaxNewDiagnostics of a Summary's diagnostics, whatever it claims", func() {
		sum := &derived.Summary{NewTotal: 3}
		for i := range 2000 {
			sum.New = append(sum.New, derived.Diagnostic{Seq: int64(i)})
		}
		listed, total := boundedNew(sum)
		Expect(listed).To(HaveLen(derived.MaxNewDiagnostics))
		Expect(total).To(Equal(int64(2000)))
	})
})
