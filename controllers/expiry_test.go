package controllers

import (
	"bytes"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/store"
)

// Retention by age: spec.deleteAfterIdle, measured against a fake clock
// the spec steps (no test waits real hours).
var _ = Describe("Retention by age", Ordered, func() {
	clock := clocktesting.NewFakeClock(time.Now())
	m := localManager("expiry", func(c *Config) { c.Clock = clock })
	var (
		ns     string
		bucket store.Bucket
		sio    *SessionIO
		log    = readLog("aborted-turn.jsonl")
	)
	BeforeAll(func() { ns, bucket, sio = m.ns, m.bucket(), m.sio })

	idleFor := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	objects := func(s *turnlogv1.Session) []string { return rootKeys(bucket, s) }
	create := func(name string, idle *metav1.Duration) *turnlogv1.Session {
		GinkgoHelper()
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: turnlogv1.SessionSpec{DeleteAfterIdle: idle}}
		Expect(k8sClient.Create(ctx, s)).To(Succeed())
		_, _, err := sio.Import(ctx, ns, name, bytes.NewReader(log))
		Expect(err).NotTo(HaveOccurred())
		return waitReady(ns, name)
	}

	It("says when an idle Session goes, deletes it then with its log, keeps what its forks refer to, and spares the others", func() {
		idle := create("idle", idleFor(time.Hour))
		Expect(idle.Status.ExpiresAt).NotTo(BeNil())
		Expect(idle.Status.ExpiresAt.Time).To(BeTemporally("~", idle.Status.LastAppendTime.Add(time.Hour), time.Second))
		busy := create("busy", idleFor(3*time.Hour))
		forever := create("forever", nil)
		Expect(forever.Status.ExpiresAt).To(BeNil())
		src := create("src", idleFor(time.Hour))
		Expect(k8sClient.Create(ctx, newFork(ns, "src-fork", "src", "21"))).To(Succeed())
		waitReady(ns, "src-fork")

		By("two hours later, at the next look at each Session")
		clock.Step(2 * time.Hour)
		for _, name := range []string{"idle", "busy", "forever", "src"} {
			Expect(sessionio.Nudge(ctx, k8sClient, client.ObjectKey{Namespace: ns, Name: name}, nil)).To(Succeed())
		}
		for _, s := range []*turnlogv1.Session{idle, src} {
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(s), &turnlogv1.Session{}))
			}).Should(BeTrue(), s.Name)
			Eventually(sessionEvents(ns, s.Name, turnlogv1.EventExpired)).Should(HaveLen(1))
		}
		Expect(notes(sessionEvents(ns, "idle", turnlogv1.EventExpired)(Default))[0]).To(
			MatchRegexp(`^no append since \S+, spec.deleteAfterIdle 1h0m0s: the Session is deleted and its log deleted with it$`))
		Expect(objects(idle)).To(BeEmpty(), "retention Delete applied")
		Expect(withoutTranscriptParts(objects(src))).To(ContainElement(HaveSuffix("/deleted.json")), "the source keeps what its fork refers to")
		Expect(exportLog(sio, ns, "src-fork")).To(Equal(string(log)))

		By("the others stay: one not idle long enough, one without spec.deleteAfterIdle")
		Consistently(func(g Gomega) {
			getSession(ns, "busy")(g)
			getSession(ns, "forever")(g)
		}).WithTimeout(2 * time.Second).Should(Succeed())
		Expect(getSession(ns, "busy")(Default).Status.ExpiresAt.Time).To(BeTemporally(">", clock.Now()))
		_ = busy
	})

	It("counts an append as activity, even one made without a nudge", func() {
		// Longer than the clock has gone on so far, so that it is not due
		// at its creation, which the API server stamps with the real time.
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "quiet-writer", Namespace: ns}, Spec: turnlogv1.SessionSpec{DeleteAfterIdle: idleFor(3 * time.Hour)}}
		Expect(k8sClient.Create(ctx, s)).To(Succeed())
		_, _, err := sio.Import(ctx, ns, "quiet-writer", bytes.NewReader(logLines(log, 8)))
		Expect(err).NotTo(HaveOccurred())
		waitReady(ns, "quiet-writer")
		// Four hours on, a turn is appended straight to the store: the
		// controller has not seen it when it next looks, with the
		// Session's time up.
		clock.Step(4 * time.Hour)
		lg, err := sio.open(ctx, getSession(ns, "quiet-writer")(Default))
		Expect(err).NotTo(HaveOccurred())
		_, err = lg.NewAppender("host").Append(ctx, bytes.Split(bytes.TrimSpace(stripSeqs(log[len(logLines(log, 8)):])), []byte("\n"))...)
		Expect(err).NotTo(HaveOccurred())
		// A look at the Session, not a nudge.
		Expect(k8sClient.Patch(ctx, s, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/touched":"yes"}}}`)))).To(Succeed())
		Eventually(func(g Gomega) *int64 { return getSession(ns, "quiet-writer")(g).Status.HeadSeq }).Should(HaveValue(BeEquivalentTo(21)))
		Expect(sessionEvents(ns, "quiet-writer", turnlogv1.EventExpired)(Default)).To(BeEmpty())
		Expect(getSession(ns, "quiet-writer")(Default).Status.ExpiresAt.Time).To(BeTemporally(">", clock.Now()))
	})
})

// stripSeqs removes the "seq" field that starts each line of a log, as an
// appender takes events.
func stripSeqs(log []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(bytes.TrimSpace(log), []byte("\n")) {
		if i := bytes.IndexByte(l, ','); i > 0 && bytes.HasPrefix(l, []byte(`{"seq":`)) {
			l = append([]byte("{"), l[i+1:]...)
		}
		out = append(out, l)
	}
	return bytes.Join(out, []byte("\n"))
}

func TestExpiresAt(t *testing.T) {
	created := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	if _, ok := expiresAt(s); ok {
		t.Error("a Session without spec.deleteAfterIdle expires")
	}
	s.Spec.DeleteAfterIdle = &metav1.Duration{Duration: time.Hour}
	if at, _ := expiresAt(s); !at.Equal(created.Add(time.Hour)) {
		t.Errorf("before any append: expires at %s, want an hour after its creation", at)
	}
	s.Status.LastAppendTime = &metav1.MicroTime{Time: created.Add(5 * time.Hour)}
	if at, _ := expiresAt(s); !at.Equal(created.Add(6 * time.Hour)) {
		t.Errorf("expires at %s, want an hour after its last append", at)
	}
	due := map[dueKey]float64{}
	s.Namespace = "team"
	noteExpiry(s)
	countDue(s, created.Add(5*time.Hour+30*time.Minute), due)
	countDue(&turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "team"}}, created, due)
	if due[dueKey{"team", "1h"}] != 1 || due[dueKey{"team", "24h"}] != 1 {
		t.Errorf("due %v, want the Session due within the hour and the day", due)
	}
	countDue(s, created, due)
	if due[dueKey{"team", "1h"}] != 1 || due[dueKey{"team", "24h"}] != 2 {
		t.Errorf("due %v: six hours ahead is within the day, not the hour", due)
	}
}
