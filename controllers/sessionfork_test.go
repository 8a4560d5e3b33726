package controllers

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
)

func newFork(ns, name, source, atSeq string) *turnlogv1.SessionFork {
	return &turnlogv1.SessionFork{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: turnlogv1.SessionForkSpec{
			Source: turnlogv1.SessionReference{Name: source},
			AtSeq:  atSeq,
			Target: turnlogv1.ForkTarget{Labels: map[string]turnlogv1.LabelValue{"team": "support"}},
		},
	}
}

// A SessionFork as a user applies it with kubectl, in local worker mode.
var _ = Describe("SessionFork controller", Ordered, func() {
	m := localManager("forks")
	var log []byte

	BeforeAll(func() {
		log = readLog("aborted-turn.jsonl")
		_, _, err := m.sio.Import(ctx, m.ns, "support-chat", bytes.NewReader(log))
		Expect(err).NotTo(HaveOccurred())
		waitReady(m.ns, "support-chat")
	})

	It(`materialises atSeq "15.1" as a child Session holding the source's whole turns through the aborted turn`, func() {
		source := getSession(m.ns, "support-chat")(Default)
		Expect(k8sClient.Create(ctx, newFork(m.ns, "support-chat-retry", "support-chat", "15.1"))).To(Succeed())

		Eventually(func(g Gomega) {
			f := getFork(m.ns, "support-chat-retry")(g)
			g.Expect(cond(f.Status.Conditions, turnlogv1.ConditionSucceeded)).To(Equal("True/Forked"))
		}).Should(Succeed())
		f := getFork(m.ns, "support-chat-retry")(Default)
		Expect(*f.Status.AnchorSeq).To(Equal(int64(15)))
		Expect(*f.Status.CutSeq).To(Equal(int64(15)))
		Expect(*f.Status.CutTurn).To(Equal(int64(2)))
		Expect(f.Status.CutReason).To(Equal("aborted"))
		Expect(f.Status.ChildName).To(Equal("support-chat-retry"))
		Expect(f.Status.ObservedGeneration).To(Equal(f.Generation))

		child := waitReady(m.ns, "support-chat-retry")
		Expect(child.Spec.ForkedFrom).To(Equal(&turnlogv1.ForkOrigin{
			Session: "support-chat", UID: string(source.UID), Fork: "support-chat-retry", ForkUID: string(f.UID), AnchorSeq: 15, CutSeq: 15,
		}))
		Expect(child.Labels).To(Equal(map[string]string{
			turnlogv1.LabelForkSource: "support-chat", turnlogv1.LabelFork: "support-chat-retry", "team": "support",
		}))
		Expect(child.Spec.Adapter).To(Equal(source.Spec.Adapter))
		Expect(*child.Status.HeadSeq).To(Equal(int64(15)))
		Expect(child.Status.LastTurnEnd.Reason).To(Equal("aborted"))
		// The aborted turn's frozen partial text is copied as events but
		// stays out of the transcript: one assistant message, from turn 1.
		Expect(child.Status.Replay.Native + child.Status.Replay.Foreign).To(Equal(int64(1)))

		Expect(exportLog(m.sio, m.ns, "support-chat-retry")).To(Equal(string(logLines(log, 16))))
		Expect(exportLog(m.sio, m.ns, "support-chat")).To(Equal(string(log)), "the source is never written")
		Eventually(func(g Gomega) []string {
			return notes(forkEvents(g, m.ns, "support-chat-retry", turnlogv1.EventForked))
		}).Should(ConsistOf("created Session support-chat-retry from support-chat seq 0..15, the one segment holding them written again, cut (atSeq 15.1, anchor 15, turn 2 ended aborted)"))
	})

	It("names the child after spec.target.name", func() {
		fork := newFork(m.ns, "renamed", "support-chat", "3")
		fork.Spec.Target.Name = "support-chat-first-turn"
		Expect(k8sClient.Create(ctx, fork)).To(Succeed())
		child := waitReady(m.ns, "support-chat-first-turn")
		Expect(*child.Status.HeadSeq).To(Equal(int64(7)))
		Expect(exportLog(m.sio, m.ns, "support-chat-first-turn")).To(Equal(string(logLines(log, 8))))
	})

	DescribeTable("fails for good, with a reason, a Warning ForkFailed Event and no child",
		func(fork *turnlogv1.SessionFork, reason, message string) {
			fork.Namespace = m.ns
			Expect(k8sClient.Create(ctx, fork)).To(Succeed())
			Eventually(func(g Gomega) {
				f := getFork(m.ns, fork.Name)(g)
				g.Expect(cond(f.Status.Conditions, turnlogv1.ConditionSucceeded)).To(Equal("False/" + reason))
				g.Expect(f.Status.ObservedGeneration).To(Equal(f.Generation))
			}).Should(Succeed())
			Expect(getFork(m.ns, fork.Name)(Default).Status.Conditions[0].Message).To(ContainSubstring(message))
			Eventually(func(g Gomega) []string {
				return notes(forkEvents(g, m.ns, fork.Name, turnlogv1.EventForkFailed))
			}).Should(ConsistOf(HavePrefix(reason + ": ")))
			children := &turnlogv1.SessionList{}
			Expect(k8sClient.List(ctx, children, client.InNamespace(m.ns), client.MatchingLabels{turnlogv1.LabelFork: fork.Name})).To(Succeed())
			Expect(children.Items).To(BeEmpty())
		},
		Entry("source not found", newFork("", "orphan", "no-such-session", "3"),
			turnlogv1.ReasonSourceNotFound, "source Session no-such-session does not exist"),
		Entry("anchor beyond the head", newFork("", "too-far", "support-chat", "99.5"),
			turnlogv1.ReasonAnchorBeyondHead, "anchor seq 99 is beyond the log's head (seq 21)"),
		Entry("target name taken", func() *turnlogv1.SessionFork {
			f := newFork("", "clash", "support-chat", "3")
			f.Spec.Target.Name = "support-chat" // the source itself
			return f
		}(), turnlogv1.ReasonTargetExists, "Session support-chat already exists and was not created by this SessionFork"),
	)

	It("waits with TurnInProgress while the anchor's turn is open, and completes after the append that ends it", func() {
		_, _, err := m.sio.Import(ctx, m.ns, "streaming", bytes.NewReader(logLines(log, 19)))
		Expect(err).NotTo(HaveOccurred())
		waitReady(m.ns, "streaming")
		Expect(k8sClient.Create(ctx, newFork(m.ns, "mid-turn", "streaming", "17.1"))).To(Succeed())
		Eventually(func(g Gomega) string {
			return cond(getFork(m.ns, "mid-turn")(g).Status.Conditions, turnlogv1.ConditionSucceeded)
		}).Should(Equal("Unknown/TurnInProgress"))
		Consistently(func(g Gomega) error {
			return k8sClient.Get(ctx, client.ObjectKey{Namespace: m.ns, Name: "mid-turn"}, &turnlogv1.Session{})
		}, "1s").ShouldNot(Succeed(), "no child before the turn ends")

		_, _, err = m.sio.Append(ctx, m.ns, "streaming", bytes.NewReader(bytes.TrimPrefix(log, logLines(log, 19))))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) string {
			return cond(getFork(m.ns, "mid-turn")(g).Status.Conditions, turnlogv1.ConditionSucceeded)
		}).Should(Equal("True/Forked"))
		Expect(*getFork(m.ns, "mid-turn")(Default).Status.CutSeq).To(Equal(int64(21)))
		waitReady(m.ns, "mid-turn")
		Expect(exportLog(m.sio, m.ns, "mid-turn")).To(Equal(string(log)))
	})
})

// A manager that dies in the middle of a fork, and the one that replaces it.
var _ = Describe("SessionFork controller restarted mid-fork", func() {
	It("leaves exactly one child with exactly the source's prefix", func() {
		ns := newNamespace("fork-restart")
		mem := storesAt("mem://")
		defer mem.Close()
		bucket, err := mem.buckets.Bucket(ctx, "mem://")
		Expect(err).NotTo(HaveOccurred())
		sio := &SessionIO{Client: k8sClient, Stores: mem}
		log := loggen.Log(3000, 7)
		_, n, err := sio.Import(ctx, ns, "long", bytes.NewReader(log))
		Expect(err).NotTo(HaveOccurred())

		By("running a manager whose store breaks after the first object of the child's log")
		broken := &crashingBucket{Bucket: bucket, location: "/long-fork/", writesLeft: 1}
		stop := startManager(ns, Config{Stores: bucketStores{broken}, WorkerMode: WorkerModeLocal, PollInterval: time.Hour})
		Expect(k8sClient.Create(ctx, newFork(ns, "long-fork", "long", "2500"))).To(Succeed())
		Eventually(func(g Gomega) string {
			return getFork(ns, "long-fork")(g).Status.ChildName
		}).Should(Equal("long-fork"))
		Eventually(broken.failed.Load).Should(BeTrue())
		stop()
		f := getFork(ns, "long-fork")(Default)
		Expect(cond(f.Status.Conditions, turnlogv1.ConditionSucceeded)).To(Equal("Unknown/Forking"))

		By("starting a healthy manager")
		stop = startManager(ns, Config{Stores: mem, WorkerMode: WorkerModeLocal, PollInterval: time.Hour})
		defer stop()
		Eventually(func(g Gomega) string {
			return cond(getFork(ns, "long-fork")(g).Status.Conditions, turnlogv1.ConditionSucceeded)
		}).Should(Equal("True/Forked"))
		cut := *getFork(ns, "long-fork")(Default).Status.CutSeq
		Expect(cut).To(BeNumerically(">=", 2500))
		Expect(cut).To(BeNumerically("<", n))

		children := &turnlogv1.SessionList{}
		Expect(k8sClient.List(ctx, children, client.InNamespace(ns), client.MatchingLabels{turnlogv1.LabelFork: "long-fork"})).To(Succeed())
		Expect(children.Items).To(HaveLen(1))
		child := waitReady(ns, "long-fork")
		Expect(*child.Status.HeadSeq).To(Equal(cut))
		Expect(exportLog(sio, ns, "long-fork")).To(Equal(string(logLines(log, int(cut)+1))))
	})
})

// bucketStores serves every Session from one bucket.
type bucketStores struct{ bucket store.Bucket }

func (s bucketStores) Store(_ context.Context, name string) (*SessionStore, error) {
	return &SessionStore{StoreConfig: StoreConfig{Name: name, URL: "mem://"}, Logs: sessionlog.New(s.bucket)}, nil
}

// crashingBucket lets writesLeft writes into one Session's location
// through, then fails every write, like a store that went away mid-copy.
type crashingBucket struct {
	store.Bucket
	location   string
	writesLeft int32
	failed     atomic.Bool
}

var errStoreGone = errors.New("connection refused")

func (b *crashingBucket) allow(key string) error {
	if strings.Contains(key, b.location) && atomic.AddInt32(&b.writesLeft, -1) < 0 {
		b.failed.Store(true)
	}
	if b.failed.Load() {
		return errStoreGone
	}
	return nil
}

func (b *crashingBucket) Copy(ctx context.Context, dst, src string) error {
	if err := b.allow(dst); err != nil {
		return err
	}
	return b.Bucket.Copy(ctx, dst, src)
}

func (b *crashingBucket) PutIfAbsent(ctx context.Context, key string, data []byte, md map[string]string) error {
	if err := b.allow(key); err != nil {
		return err
	}
	return b.Bucket.PutIfAbsent(ctx, key, data, md)
}

func (b *crashingBucket) Put(ctx context.Context, key string, data []byte, md map[string]string) error {
	if err := b.allow(key); err != nil {
		return err
	}
	return b.Bucket.Put(ctx, key, data, md)
}

// A host that flushes every turn leaves a segment per turn: an hour of a
// busy Session is thousands. A fork near its head must not read them all.
var _ = Describe("SessionFork of a log of many segments", func() {
	It("reads the source from the anchor's segment, and copies none of its segments", func() {
		const segments = 300
		ns := newNamespace("fork-segments")
		mem := storesAt("mem://")
		defer mem.Close()
		bucket, err := mem.buckets.Bucket(ctx, "mem://")
		Expect(err).NotTo(HaveOccurred())
		sio := &SessionIO{Client: k8sClient, Stores: mem}
		source := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: ns}}
		Expect(k8sClient.Create(ctx, source)).To(Succeed())
		a := appenderOf(mem, source)
		for turn := 1; turn <= segments; turn++ {
			_, err := a.Append(ctx, turns(turn, 1)...)
			Expect(err).NotTo(HaveOccurred())
		}

		reads := &readsUnder{Bucket: bucket, part: "/busy/"}
		stop := startManager(ns, Config{Stores: bucketStores{reads}, WorkerMode: WorkerModeLocal, PollInterval: time.Hour})
		defer stop()
		Expect(*waitReady(ns, "busy").Status.HeadSeq).To(Equal(int64(4 * segments)))
		reads.n.Store(0)

		// Turn 290's events are seqs 1157..1160: the cut is its turn/end.
		Expect(k8sClient.Create(ctx, newFork(ns, "late", "busy", "1158.5"))).To(Succeed())
		child := waitReady(ns, "late")
		Expect(*child.Status.HeadSeq).To(Equal(int64(1160)))
		Expect(exportLog(sio, ns, "late")).To(Equal(string(logLines([]byte(exportLog(sio, ns, "busy")), 1161))))
		// Finding the cut reads from the anchor's segment on, and the fork
		// refers to the others. The source's derived data is past the cut,
		// so the child's first assembly and replay read its prefix through
		// the references, once each: the source's segments are read at most
		// twice in all, never once per fork step.
		Expect(reads.n.Load()).To(BeNumerically("<=", 2*segments+20),
			"object reads of the source for a fork near the head of its %d segments", segments)
		childSegments := 0
		for o, err := range bucket.List(ctx, "") {
			Expect(err).NotTo(HaveOccurred())
			if strings.Contains(o.Key, "/late/") && strings.Contains(o.Key, "/log/") {
				childSegments++
			}
		}
		// Each turn is a segment, so the cut ends one: the child's log/
		// holds its references alone.
		Expect(childSegments).To(Equal(1), "objects of the child's log/, for a source of %d segments", segments)
	})
})

// readsUnder counts the object reads of keys holding part.
type readsUnder struct {
	store.Bucket
	part string
	n    atomic.Int64
}

func (b *readsUnder) Get(ctx context.Context, key string) ([]byte, error) {
	if strings.Contains(key, b.part) {
		b.n.Add(1)
	}
	return b.Bucket.Get(ctx, key)
}

func (b *readsUnder) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if strings.Contains(key, b.part) {
		b.n.Add(1)
	}
	return b.Bucket.NewRangeReader(ctx, key, offset, length)
}
