package controllers

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// A Session in local worker mode, as a user sees it after `turnlog import`
// and `turnlog append`: its status and its Events.
var _ = Describe("Session controller", Ordered, func() {
	var (
		ns     string
		disk   string
		stores *BucketCache
		sio    *SessionIO
		stop   func()
	)

	BeforeAll(func() {
		ns = newNamespace("sessions")
		disk = GinkgoT().TempDir()
		stores = storesAt("mem://", StoreConfig{Name: "disk", URL: "file://" + disk, Prefix: "team-a"})
		sio = &SessionIO{Client: k8sClient, Stores: stores}
		// A long poll interval: every update below must come from a nudge.
		stop = startManager(ns, Config{Stores: stores, WorkerMode: WorkerModeLocal, PollInterval: time.Hour})
	})
	AfterAll(func() {
		stop()
		Expect(stores.Close()).To(Succeed())
	})

	It("summarises an imported log in status, and follows appends", func() {
		log := readLog("aborted-turn.jsonl")
		_, n, err := sio.Import(ctx, ns, "haiku", bytes.NewReader(logLines(log, 16)))
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(Equal(int64(16)))

		s := waitReady(ns, "haiku")
		Expect(*s.Status.HeadSeq).To(Equal(int64(15)))
		Expect(s.Status.Turns).To(Equal(int64(2)))
		Expect(*s.Status.LastTurnEnd).To(Equal(turnlogv1.TurnEnd{Seq: 15, Turn: 2, Reason: "aborted"}))
		Expect(*s.Status.AssembledThroughSeq).To(Equal(int64(15)))
		Expect(s.Status.Location).To(ContainSubstring(ns + "/haiku/" + string(s.UID)))
		// Turn 2 was aborted: its frozen partial text is no assistant message.
		Expect(s.Status.Replay).To(Equal(&turnlogv1.ReplaySummary{
			ThroughSeq: 15, Native: 1, ContextMessages: 3,
			Adapter: turnlogv1.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5", ReleaseLine: "1"},
		}))
		Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/Current"))
		Expect(cond(s.Status.Conditions, turnlogv1.ConditionAssembled)).To(Equal("True/Assembled"))
		Expect(cond(s.Status.Conditions, turnlogv1.ConditionReplayDegraded)).To(Equal("False/NoneDegraded"))
		Expect(s.Status.Worker).To(BeNil())

		By("appending the third turn")
		first, n, err := sio.Append(ctx, ns, "haiku", bytes.NewReader(bytes.TrimPrefix(log, logLines(log, 16))))
		Expect(err).NotTo(HaveOccurred())
		Expect([]int64{first, n}).To(Equal([]int64{16, 6}))
		Eventually(func(g Gomega) {
			s := getSession(ns, "haiku")(g)
			g.Expect(s.Status.Replay).NotTo(BeNil())
			g.Expect(s.Status.Replay.ThroughSeq).To(Equal(int64(21)))
			g.Expect(s.Status.Replay.Native).To(Equal(int64(2)))
			g.Expect(*s.Status.HeadSeq).To(Equal(int64(21)))
			g.Expect(s.Status.Turns).To(Equal(int64(3)))
			g.Expect(*s.Status.AssembledThroughSeq).To(Equal(int64(21)))
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/Current"))
		}).Should(Succeed())
		Expect(exportLog(sio, ns, "haiku")).To(Equal(string(log)))
	})

	It("replays by the release line the Session names: pi-ai 1.x unless it names 0.73", func() {
		gpt5 := turnlogv1.Adapter{API: "openai-responses", Provider: "openai", Model: "gpt-5"}
		line073 := gpt5
		line073.ReleaseLine = "0.73"
		for name, adapter := range map[string]turnlogv1.Adapter{"switch-default": gpt5, "switch-073": line073} {
			Expect(k8sClient.Create(ctx, &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: turnlogv1.SessionSpec{Adapter: adapter}})).To(Succeed())
			_, _, err := sio.Import(ctx, ns, name, bytes.NewReader(readLog("model-switch.jsonl")))
			Expect(err).NotTo(HaveOccurred())
		}
		claude := func(name string) string {
			s := waitReady(ns, name)
			Expect(s.Status.Replay.Foreign).To(Equal(int64(1)))
			tr, _, err := sio.Transcript(ctx, ns, name, func(a turnlog.Adapter) turnlog.Adapter { return a })
			Expect(err).NotTo(HaveOccurred())
			Expect(tr.Messages[1].Seq).To(Equal(int64(7)))
			return string(tr.Messages[1].Message)
		}
		// Claude's reasoning: dropped for a pi 1.x host, text for a 0.73 one.
		Expect(claude("switch-default")).To(ContainSubstring(`"content":[{"type":"text","text":"The rise starts with Tuesday's deploy, which halved the cache."}]`))
		Expect(waitReady(ns, "switch-default").Status.Replay.Adapter.ReleaseLine).To(Equal("1"))
		Expect(claude("switch-073")).To(ContainSubstring(`"content":[{"type":"text","text":"Tuesday matches the cache size change."},{"type":"text","text":"The rise starts`))
		Expect(waitReady(ns, "switch-073").Status.Replay.Adapter.ReleaseLine).To(Equal("0.73"))

		bad := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "switch-bad"},
			Spec: turnlogv1.SessionSpec{Adapter: turnlogv1.Adapter{ReleaseLine: "0.8"}}}
		Expect(k8sClient.Create(ctx, bad)).To(MatchError(ContainSubstring(`spec.adapter.releaseLine: Unsupported value: "0.8": supported values: "1", "0.73"`)))
	})

	It("refuses an append that does not continue the log, and writes nothing", func() {
		log := readLog("aborted-turn.jsonl")
		_, _, err := sio.Import(ctx, ns, "refused", bytes.NewReader(logLines(log, 8)))
		Expect(err).NotTo(HaveOccurred())
		_, _, err = sio.Append(ctx, ns, "refused", bytes.NewReader(bytes.TrimPrefix(log, logLines(log, 9))))
		Expect(err).To(MatchError(ContainSubstring("line 1")))
		Expect(exportLog(sio, ns, "refused")).To(Equal(string(logLines(log, 8))))
	})

	It("pairs a tool result that comes in the next turn, and counts one whose call was aborted", func() {
		log := readLog("tool-result-next-turn.jsonl")
		// Imported up to the toolUse turn's end first, so the result arrives
		// for the next replay run.
		_, _, err := sio.Import(ctx, ns, "next-turn", bytes.NewReader(logLines(log, 8)))
		Expect(err).NotTo(HaveOccurred())
		Expect(waitReady(ns, "next-turn").Status.Replay.ThroughSeq).To(Equal(int64(7)))
		_, _, err = sio.Append(ctx, ns, "next-turn", bytes.NewReader(bytes.TrimPrefix(log, logLines(log, 8))))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			s := getSession(ns, "next-turn")(g)
			g.Expect(s.Status.Replay.ThroughSeq).To(Equal(int64(21)))
			g.Expect(s.Status.Replay.Native).To(Equal(int64(2)))
			g.Expect(s.Status.Replay.OrphanToolResults).To(Equal(int64(1)))
		}).Should(Succeed())
		tr, _, err := sio.Transcript(ctx, ns, "next-turn", func(a turnlog.Adapter) turnlog.Adapter { return a })
		Expect(err).NotTo(HaveOccurred())
		var roles []string
		for _, m := range tr.Messages {
			roles = append(roles, fmt.Sprintf("%d:%s", m.Seq, m.Role))
		}
		Expect(roles).To(Equal([]string{"2:user", "6:assistant", "9:toolResult", "17:user", "20:assistant"}))
	})

	It("raises a ReplayDegraded Event with seq, cause and adapter for legacy replay state", func() {
		_, _, err := sio.Import(ctx, ns, "legacy", bytes.NewReader(readLog("legacy-flat-state.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		s := waitReady(ns, "legacy")
		Expect(s.Status.Replay.Degraded).To(Equal(int64(1)))
		Expect(s.Status.Replay.Foreign).To(Equal(int64(1)))
		Expect(s.Status.Replay.Native).To(Equal(int64(1)))
		Expect(s.Status.Replay.DegradedSeqs.Version).To(Equal([]int64{3}))
		Expect(cond(s.Status.Conditions, turnlogv1.ConditionReplayDegraded)).To(Equal("True/MessagesDegraded"))

		Eventually(sessionEvents(ns, "legacy", turnlogv1.EventReplayDegraded)).Should(HaveLen(1))
		e := sessionEvents(ns, "legacy", turnlogv1.EventReplayDegraded)(Default)[0]
		Expect(e.Type).To(Equal("Warning"))
		Expect(e.Regarding.Kind).To(Equal("Session"))
		Expect(e.Note).To(HavePrefix("seq 3 replayed provider-neutral for pi-ai anthropic-messages/anthropic/claude-sonnet-4-5: cause version: "))
		Expect(len(e.Note)).To(BeNumerically("<=", 1024))
		Eventually(sessionEvents(ns, "legacy", turnlogv1.EventReplayed)).Should(ConsistOf(
			HaveField("Note", "replayed through seq 11 for pi-ai anthropic-messages/anthropic/claude-sonnet-4-5: 1 native, 1 foreign, 1 degraded")))
		Eventually(sessionEvents(ns, "legacy", turnlogv1.EventAssembled)).Should(HaveLen(1))
	})

	It("bounds the Events of a log with 50 degraded messages, keeping the count in status", func() {
		_, _, err := sio.Import(ctx, ns, "degraded", bytes.NewReader(degradedLog(50)))
		Expect(err).NotTo(HaveOccurred())
		s := waitReady(ns, "degraded")
		Expect(s.Status.Replay.Degraded).To(Equal(int64(50)))
		Expect(s.Status.Replay.DegradedSeqs.Version).To(HaveLen(turnlogv1.MaxDegradedSeqs))
		Expect(s.Status.Replay.DegradedSeqs.Version[:2]).To(Equal([]int64{3, 7}))

		Eventually(sessionEvents(ns, "degraded", turnlogv1.EventReplayDegraded)).Should(HaveLen(11))
		Consistently(sessionEvents(ns, "degraded", turnlogv1.EventReplayDegraded), "2s").Should(HaveLen(11))
		Expect(notes(sessionEvents(ns, "degraded", turnlogv1.EventReplayDegraded)(Default))).To(ContainElement(
			"40 more messages degraded in this replay run (50 in all, not listed as Events); status.replay.degradedSeqs lists them by cause"))
	})

	It("raises EnvelopeDiscarded when assembly discards a misaligned envelope", func() {
		_, _, err := sio.Import(ctx, ns, "misaligned", bytes.NewReader(readLog("misaligned-envelope.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		s := waitReady(ns, "misaligned")
		Expect(s.Status.EnvelopesDiscarded).To(Equal(int64(1)))
		Eventually(sessionEvents(ns, "misaligned", turnlogv1.EventEnvelopeDiscarded)).Should(ConsistOf(
			And(HaveField("Type", "Warning"), HaveField("Note", ContainSubstring("seq 6: ")))))
	})

	It("keeps a log in a named file:// store under the store's prefix and the Session's own location", func() {
		dir := disk
		session := &turnlogv1.Session{
			ObjectMeta: metav1.ObjectMeta{Name: "on-disk", Namespace: ns},
			Spec:       turnlogv1.SessionSpec{Storage: turnlogv1.SessionStorage{Store: "disk"}},
		}
		Expect(k8sClient.Create(ctx, session)).To(Succeed())
		_, _, err := sio.Import(ctx, ns, "on-disk", bytes.NewReader(readLog("aborted-turn.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		s := waitReady(ns, "on-disk")
		Expect(*s.Status.HeadSeq).To(Equal(int64(21)))
		Expect(s.Status.Location).To(Equal("disk:team-a/" + ns + "/on-disk/" + string(s.UID)))
		entries, err := os.ReadDir(filepath.Join(dir, "team-a", ns, "on-disk", string(s.UID), "log"))
		Expect(err).NotTo(HaveOccurred())
		Expect(entries).NotTo(BeEmpty())
	})

	It("reports an empty log as Ready with reason EmptyLog", func() {
		Expect(k8sClient.Create(ctx, &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: ns}})).To(Succeed())
		Eventually(func(g Gomega) {
			s := getSession(ns, "empty")(g)
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/EmptyLog"))
			g.Expect(s.Status.HeadSeq).To(BeNil())
			g.Expect(s.Finalizers).To(ContainElement(turnlogv1.FinalizerRetention))
		}).Should(Succeed())
	})
})

// degradedLog is a log of n turns, each answered by a host-written
// assistant message with legacy flat replay state, which replay degrades.
func degradedLog(n int) []byte {
	var b strings.Builder
	fmt.Fprintln(&b, `{"seq":0,"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}}`)
	seq := 1
	for turn := 1; turn <= n; turn++ {
		fmt.Fprintf(&b, `{"seq":%d,"type":"turn/start","turn":%d}`+"\n", seq, turn)
		fmt.Fprintf(&b, `{"seq":%d,"type":"user/message","turn":%d,"content":[{"type":"text","text":"question %d"}]}`+"\n", seq+1, turn, turn)
		fmt.Fprintf(&b, `{"seq":%d,"type":"assistant/message","turn":%d,"response":0,"message":{"role":"assistant","content":[{"type":"text","text":"answer %d"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop","replayState":{"responseId":"msg_%d"}}}`+"\n", seq+2, turn, turn, turn)
		fmt.Fprintf(&b, `{"seq":%d,"type":"turn/end","turn":%d,"reason":"stop"}`+"\n", seq+3, turn)
		seq += 4
	}
	return []byte(b.String())
}
