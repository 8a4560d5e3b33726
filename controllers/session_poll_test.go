package controllers

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
)

// countedStores opens every log on one counted bucket.
type countedStores struct {
	*BucketCache
	bucket *storetest.Counting
}

func (s countedStores) Store(ctx context.Context, name string) (*SessionStore, error) {
	st, err := s.BucketCache.Store(ctx, name)
	if err != nil {
		return nil, err
	}
	st.Logs = sessionlog.New(s.bucket)
	return st, nil
}

// Many Sessions left alone, the way most of a large installation is: what
// they cost is what the store and the API server see.
// countedStoresAt is a store cache for a new file:// directory, and the
// same stores with the requests to that directory counted.
func countedStoresAt() (*BucketCache, countedStores) {
	GinkgoHelper()
	url := "file://" + GinkgoT().TempDir()
	stores := storesAt(url)
	b, err := stores.buckets.Bucket(ctx, url)
	Expect(err).NotTo(HaveOccurred())
	return stores, countedStores{BucketCache: stores, bucket: storetest.NewCounting(b)}
}

// expectOnlyProbes: the store saw probes of at least sessions Sessions and
// nothing else.
func expectOnlyProbes(c storetest.Counts, sessions int) {
	GinkgoHelper()
	Expect(c.Attributes).To(BeNumerically(">=", sessions), "every Session is probed")
	Expect(c).To(Equal(storetest.Counts{Attributes: c.Attributes}), "probes are the only store requests")
}

var _ = Describe("Idle Sessions", Ordered, func() {
	const n = 300
	var (
		ns      string
		stores  *BucketCache
		counted countedStores
		sio     *SessionIO
		stop    func()
		conf    Config
	)

	BeforeAll(func() {
		ns = newNamespace("idle")
		stores, counted = countedStoresAt()
		sio = &SessionIO{Client: k8sClient, Stores: stores}
		// Short intervals, so that the specs see many polls of each Session.
		conf = Config{Stores: counted, WorkerMode: WorkerModeLocal, PollInterval: 100 * time.Millisecond, MaxPollInterval: 500 * time.Millisecond}
		log := readLog("model-switch.jsonl")
		for i := range n {
			_, _, err := sio.Import(ctx, ns, fmt.Sprintf("idle-%03d", i), bytes.NewReader(log))
			Expect(err).NotTo(HaveOccurred())
		}
		stop = startManager(ns, conf)
	})
	AfterAll(func() {
		stop()
		Expect(stores.Close()).To(Succeed())
	})

	// snapshot is each Session's resourceVersion, and the namespace's Events.
	snapshot := func() (map[string]string, int) {
		GinkgoHelper()
		list := &turnlogv1.SessionList{}
		Expect(k8sClient.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		versions := map[string]string{}
		for _, s := range list.Items {
			versions[s.Name] = s.ResourceVersion
		}
		events := &eventsv1.EventList{}
		Expect(k8sClient.List(ctx, events, client.InNamespace(ns))).To(Succeed())
		return versions, len(events.Items)
	}
	allReady := func(g Gomega) {
		list := &turnlogv1.SessionList{}
		g.Expect(k8sClient.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		ready := 0
		for _, s := range list.Items {
			if cond(s.Status.Conditions, turnlogv1.ConditionReady) == "True/Current" && *s.Status.HeadSeq == 16 && s.Status.Replay != nil && s.Status.LastAppendTime != nil {
				ready++
			}
		}
		g.Expect(ready).To(Equal(n))
	}
	// idle checks that over a few max poll intervals every Session was
	// looked at, with probes only, and nothing was written anywhere.
	idle := func() {
		GinkgoHelper()
		versions, events := snapshot()
		counted.bucket.Reset()
		time.Sleep(4 * conf.MaxPollInterval)
		expectOnlyProbes(counted.bucket.Counts(), n)
		after, afterEvents := snapshot()
		Expect(after).To(Equal(versions), "no Session was written")
		Expect(afterEvents).To(Equal(events), "no Event was raised")
	}

	It("are all Ready, then cost one store request per poll and write nothing", func() {
		Eventually(allReady).WithTimeout(3 * time.Minute).Should(Succeed())
		// Until the cache has caught up with the last status patches, a
		// reconcile may find a stale status and look at the log in full.
		time.Sleep(2 * conf.MaxPollInterval)
		idle()
	})

	It("are not worked on again by a restarted manager", func() {
		stop()
		counted.bucket.Reset()
		versions, events := snapshot()
		stop = startManager(ns, conf)
		time.Sleep(4 * conf.MaxPollInterval)
		c := counted.bucket.Counts()
		Expect(c.Attributes).To(BeNumerically(">=", n), "every Session is looked at")
		Expect(c.Puts+c.Creates).To(BeZero(), "no worker run writes derived data")
		after, afterEvents := snapshot()
		Expect(after).To(Equal(versions), "no Session was written")
		Expect(afterEvents).To(Equal(events), "no Event was raised")
		Eventually(allReady).Should(Succeed())
	})

	It("notice an append made without a nudge at the next poll", func() {
		s := waitReady(ns, "idle-007")
		log, err := sessionlog.New(counted.bucket).Log(sessionlog.Location{Namespace: s.Namespace, Session: s.Name, UID: string(s.UID)})
		Expect(err).NotTo(HaveOccurred())
		_, err = log.NewAppender("").Append(ctx, []byte(`{"type":"turn/start","turn":3}`), []byte(`{"type":"turn/end","turn":3,"reason":"aborted"}`))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			s := getSession(ns, "idle-007")(g)
			g.Expect(*s.Status.HeadSeq).To(Equal(int64(18)))
			g.Expect(s.Status.LastTurnEnd.Reason).To(Equal("aborted"))
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/Current"))
			g.Expect(s.Status.LastAppendTime.Time).To(BeTemporally(">", s.CreationTimestamp.Time))
		}).WithTimeout(2 * time.Second).Should(Succeed())
	})
})

// TestIdlePoll: a quiet log is polled about as often as it has been quiet,
// within the bounds, and a nudge counts as activity.
func TestIdlePoll(t *testing.T) {
	r := &SessionReconciler{PollInterval: time.Minute, MaxPollInterval: time.Hour}
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	session := func(quiet time.Duration, nudged time.Duration) *turnlogv1.Session {
		s := &turnlogv1.Session{}
		s.Status.LastAppendTime = &metav1.MicroTime{Time: now.Add(-quiet)}
		if nudged > 0 {
			s.Annotations = map[string]string{turnlogv1.AnnotationRequestedAt: now.Add(-nudged).Format(time.RFC3339Nano)}
		}
		return s
	}
	for _, c := range []struct {
		name          string
		quiet, nudged time.Duration
		want          time.Duration
	}{
		{"just appended", time.Second, 0, time.Minute},
		{"quiet for ten minutes", 10 * time.Minute, 0, 10 * time.Minute},
		{"quiet for a day", 24 * time.Hour, 0, time.Hour},
		{"quiet for a day, nudged 5 minutes ago", 24 * time.Hour, 5 * time.Minute, 5 * time.Minute},
		{"an old nudge", 10 * time.Minute, 24 * time.Hour, 10 * time.Minute},
	} {
		for range 20 {
			if got := r.idlePoll(session(c.quiet, c.nudged), now); got > c.want || got < c.want*9/10 {
				t.Errorf("%s: next poll in %s, want %s less at most a tenth", c.name, got, c.want)
			}
		}
	}
	if got := (&SessionReconciler{PollInterval: time.Minute}).idlePoll(session(24*time.Hour, 0), now); got > time.Minute {
		t.Errorf("without a max poll interval: next poll in %s, want at most the poll interval", got)
	}
}
