package controllers

import (
	"fmt"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/sessionlog"
)

// One tenant floods the shared manager from its namespace — nudges to
// many Sessions every second, Sessions whose head segment is large and
// slow to read, dozens of forks of a large log — while another tenant
// appends to one Session in its own namespace and waits for status to
// show it. The quiet tenant's wait must stay bounded: before the manager
// served namespaces in turn it grew with the flood (tens of seconds, and
// minutes once the forks' children were assembled).
var _ = Describe("Sharing the manager between namespaces", Ordered, func() {
	const (
		nudgedSessions = 100
		slowSessions   = 3
		// slowSegment is the events of each slow Session's one segment,
		// all of which a look at its head parses.
		slowSegment = 150_000
		forks       = 30
		// sourceTurns is the size of the forked log: each child copies a
		// part and then assembles and replays it.
		sourceTurns = 4_000
		// maxWait and medianWait bound the quiet tenant's append -> status.
		maxWait    = 5 * time.Second
		medianWait = 2 * time.Second
	)
	var (
		teamA, teamB string
		alice, bob   client.Client
		stores       *BucketCache
		stop         func()
	)

	BeforeAll(func() {
		teamA, teamB = newNamespace("flood"), newNamespace("quiet")
		alice, bob = tenant(teamA, "alice"), tenant(teamB, "bob")
		stores = storesAt("file://" + GinkgoT().TempDir())
		// The default limits, and a rate per namespace: team-a's nudges
		// alone are five times over it.
		stop = startManagerIn([]string{teamA, teamB}, Config{
			Stores: stores, WorkerMode: WorkerModeLocal, PollInterval: time.Minute,
			Limits: Limits{NamespaceReconcileRate: 20},
		})
	})
	AfterAll(func() {
		stop()
		Expect(stores.Close()).To(Succeed())
	})

	nudge := func(c client.Client, ns, name string) error {
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, turnlogv1.AnnotationRequestedAt, time.Now().UTC().Format(time.RFC3339Nano))
		return c.Patch(ctx, s, client.RawPatch("application/merge-patch+json", []byte(patch)))
	}

	// create makes a Session as its tenant and writes its log in chunks
	// of events, one segment each.
	create := func(c client.Client, ns, name string, chunks ...[][]byte) *turnlogv1.Session {
		GinkgoHelper()
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		Expect(c.Create(ctx, s)).To(Succeed())
		a := appenderOf(stores, s)
		for _, chunk := range chunks {
			_, err := a.Append(ctx, chunk...)
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(nudge(c, ns, name)).To(Succeed())
		return s
	}

	It("keeps another namespace's appends reaching status within a bound", func() {
		By("team-b: one Session, current with its log")
		quiet := create(bob, teamB, "quiet", turns(1, 1))
		waitReady(teamB, quiet.Name)

		By("team-a: Sessions to nudge, Sessions with a large segment, a large log to fork")
		var names []string
		for i := range nudgedSessions {
			names = append(names, create(alice, teamA, fmt.Sprintf("nudged-%03d", i), turns(1, 1)).Name)
		}
		for i := range slowSessions {
			names = append(names, create(alice, teamA, fmt.Sprintf("slow-%d", i), turns(1, 1), filler(slowSegment)).Name)
		}
		var source [][][]byte
		for t := 0; t < sourceTurns; t += 500 {
			source = append(source, turns(t+1, min(500, sourceTurns-t)))
		}
		create(alice, teamA, "large", source...)
		waitReady(teamA, "large")

		By("team-a floods: nudges every second, and forks of the large log")
		flood, floodDone := make(chan struct{}), &sync.WaitGroup{}
		floodDone.Go(func() {
			defer GinkgoRecover()
			for {
				// Eight nudgers at once, as a tenant's many hosts would.
				var round sync.WaitGroup
				for w := range 8 {
					round.Go(func() {
						for i := w; i < len(names); i += 8 {
							_ = nudge(alice, teamA, names[i]) // a tenant's nudges may fail; the flood goes on
						}
					})
				}
				round.Wait()
				select {
				case <-flood:
					return
				case <-time.After(time.Second):
				}
			}
		})
		for i := range forks {
			// Cuts spread over the log, floored fractions included.
			at := fmt.Sprintf("%d.5", (i+1)*(sourceTurns*4)/(forks+1))
			Expect(alice.Create(ctx, &turnlogv1.SessionFork{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fork-%02d", i), Namespace: teamA},
				Spec:       turnlogv1.SessionForkSpec{Source: turnlogv1.SessionReference{Name: "large"}, AtSeq: at},
			})).To(Succeed())
		}

		By("team-b appends a turn at a time; each must reach status.headSeq within the bound")
		a := appenderOf(stores, quiet)
		var waits []time.Duration
		for turn := 1; turn <= 20; turn++ {
			head, err := a.Append(ctx, turns(1+turn, 1)...)
			Expect(err).NotTo(HaveOccurred())
			start := time.Now()
			Expect(nudge(bob, teamB, quiet.Name)).To(Succeed())
			Eventually(func(g Gomega) int64 {
				s := getSession(teamB, quiet.Name)(g)
				g.Expect(s.Status.HeadSeq).NotTo(BeNil())
				return *s.Status.HeadSeq
			}).WithTimeout(2 * time.Minute).WithPolling(20 * time.Millisecond).Should(BeNumerically(">=", head))
			waits = append(waits, time.Since(start))
			time.Sleep(300 * time.Millisecond)
		}
		close(flood)
		floodDone.Wait()
		slices.Sort(waits)
		median, longest := waits[len(waits)/2], waits[len(waits)-1]
		GinkgoWriter.Printf("team-b append -> status under team-a's flood: median %s, max %s\n", median, longest)
		Expect(longest).To(BeNumerically("<", maxWait), "waits %v", waits)
		Expect(median).To(BeNumerically("<", medianWait), "waits %v", waits)

		By("team-a learns why it waits: forks queued for a copy slot, runs for a worker slot, Throttled")
		Eventually(func(g Gomega) []string {
			events := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, events, client.InNamespace(teamA))).To(Succeed())
			var reasons []string
			for _, e := range events.Items {
				reasons = append(reasons, e.Reason)
			}
			return reasons
		}).Should(ContainElements(turnlogv1.EventForkQueued, turnlogv1.EventWorkQueued, turnlogv1.EventThrottled))

		By("team-a loses nothing: every fork completes, every child becomes Ready")
		for i := range forks {
			name := fmt.Sprintf("fork-%02d", i)
			Eventually(func(g Gomega) string {
				return cond(getFork(teamA, name)(g).Status.Conditions, turnlogv1.ConditionSucceeded)
			}).WithTimeout(3 * time.Minute).Should(Equal("True/" + turnlogv1.ReasonForked))
		}
		for i := range forks {
			waitReady(teamA, fmt.Sprintf("fork-%02d", i))
		}
	})
})

// appenderOf opens s's log in stores for appending.
func appenderOf(stores *BucketCache, s *turnlogv1.Session) *sessionlog.Appender {
	GinkgoHelper()
	st, err := stores.Store(ctx, s.Spec.Storage.StoreName())
	Expect(err).NotTo(HaveOccurred())
	log, err := st.Logs.Log(st.Location(s))
	Expect(err).NotTo(HaveOccurred())
	return log.NewAppender("test")
}

// turns is n turns from turn first (1-based): appended in order, turn k's
// four events are seqs 4k-3..4k, after the session/start at seq 0.
func turns(first, n int) [][]byte {
	var out [][]byte
	if first == 1 {
		out = append(out, []byte(`{"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}}`))
	}
	for turn := first; turn < first+n; turn++ {
		for _, e := range []string{
			fmt.Sprintf(`"type":"turn/start","turn":%d`, turn),
			fmt.Sprintf(`"type":"user/message","turn":%d,"content":"question %d"`, turn, turn),
			fmt.Sprintf(`"type":"assistant/message","turn":%d,"response":0,"message":{"content":[{"type":"text","text":"answer %d"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop"}`, turn, turn),
			fmt.Sprintf(`"type":"turn/end","turn":%d,"reason":"stop"`, turn),
		} {
			out = append(out, fmt.Appendf(nil, `{%s}`, e))
		}
	}
	return out
}

// filler is n events that every look at the head parses: system messages
// between turns.
func filler(n int) [][]byte {
	out := make([][]byte, n)
	for i := range n {
		out[i] = fmt.Appendf(nil, `{"type":"system/message","content":"note %d"}`, i)
	}
	return out
}
