package controllers

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
)

// One tenant floods the shared manager from its namespace — nudges to
// many Sessions every second, Sessions whose head segment is large and
// slow to read, dozens of forks of a large log — while another tenant
// appends to one Session in its own namespace and waits for status to
// show it, and then for its transcript (Current). The quiet tenant's waits
// must stay bounded: before the manager served namespaces in turn, the
// wait for status grew with the flood (tens of seconds, and minutes once
// the forks' children were assembled); before it gave its worker slot to
// namespaces in turn, the wait for the transcript did (the children's runs
// took the slot first come, first served). That bound is a few runs long,
// as long as the flood's runs are on this machine.
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
		// runsWaited bounds the quiet tenant's append -> Current beyond
		// its quiet wait, in runs as long as the longest of the flood's:
		// its assemble and its replay each wait for at most one of the
		// other namespace's runs, and each takes one of its own.
		runsWaited = 4
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
		a := appenderOf(stores, quiet)
		turn := 1
		// appendTurn appends a turn to team-b's Session and returns how long
		// status.headSeq and then Current took to show it.
		appendTurn := func() (toHead, toCurrent time.Duration) {
			turn++
			head, err := a.Append(ctx, turns(turn, 1)...)
			Expect(err).NotTo(HaveOccurred())
			start := time.Now()
			Expect(nudge(bob, teamB, quiet.Name)).To(Succeed())
			Eventually(func(g Gomega) {
				s := getSession(teamB, quiet.Name)(g)
				g.Expect(s.Status.HeadSeq).NotTo(BeNil())
				if toHead == 0 && *s.Status.HeadSeq >= head {
					toHead = time.Since(start)
				}
				g.Expect(toHead).NotTo(BeZero())
				g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/Current"))
				g.Expect(s.Status.Replay).NotTo(BeNil())
				g.Expect(s.Status.Replay.ThroughSeq).To(BeNumerically(">=", head))
			}).WithTimeout(5 * time.Minute).WithPolling(20 * time.Millisecond).Should(Succeed())
			return toHead, time.Since(start)
		}
		By("team-b alone: append -> Current")
		var quietCurrent time.Duration
		for range 3 {
			_, c := appendTurn()
			quietCurrent = max(quietCurrent, c)
			time.Sleep(300 * time.Millisecond)
		}
		runsBefore := localRunBuckets()

		By("team-a: Sessions to nudge, Sessions with a large segment, a large log to fork")
		var names []string
		var nudged []*turnlogv1.Session
		for i := range nudgedSessions {
			nudged = append(nudged, create(alice, teamA, fmt.Sprintf("nudged-%03d", i), turns(1, 1)))
			names = append(names, nudged[i].Name)
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

		By("team-a floods: appends and nudges every second, and forks of the large log")
		// Half the nudged Sessions get a turn each round: each
		// then needs an assemble and a replay run, more runs than the
		// manager's one local slot gets through, so team-a always has
		// runs waiting for it.
		appenders := make([]*sessionlog.Appender, nudgedSessions)
		next := make([]int, nudgedSessions)
		for i := range nudgedSessions {
			appenders[i] = appenderOf(stores, nudged[i])
			next[i] = 2
		}
		flood, floodDone := make(chan struct{}), &sync.WaitGroup{}
		floodDone.Go(func() {
			defer GinkgoRecover()
			for r := 0; ; r++ {
				// Eight hosts at once, as a tenant's many hosts would.
				var round sync.WaitGroup
				for w := range 8 {
					round.Go(func() {
						for i := w; i < len(names); i += 8 {
							if i < nudgedSessions && (r+i)%2 == 0 {
								if _, err := appenders[i].Append(ctx, turns(next[i], 1)...); err == nil {
									next[i]++
								}
							}
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

		By("team-b appends a turn at a time; each must reach status.headSeq, then Current, within the bounds")
		var waits, currents []time.Duration
		for range 20 {
			h, c := appendTurn()
			waits, currents = append(waits, h), append(currents, c)
			time.Sleep(300 * time.Millisecond)
		}
		close(flood)
		floodDone.Wait()
		slices.Sort(waits)
		slices.Sort(currents)
		median, longest := waits[len(waits)/2], waits[len(waits)-1]
		run := longestRunSince(runsBefore)
		currentBound := quietCurrent + runsWaited*run
		GinkgoWriter.Printf("team-b append -> status under team-a's flood: median %s, max %s\n", median, longest)
		GinkgoWriter.Printf("team-b append -> Current: alone at most %s; under the flood median %s, max %s (bound %s: the flood's longest local run is at most %s)\n",
			quietCurrent, currents[len(currents)/2], currents[len(currents)-1], currentBound, run)
		Expect(longest).To(BeNumerically("<", maxWait), "waits %v", waits)
		Expect(median).To(BeNumerically("<", medianWait), "waits %v", waits)
		Expect(run).To(BeNumerically(">", 0), "the flood ran no local worker run")
		Expect(currents[len(currents)-1]).To(BeNumerically("<", currentBound), "append -> Current %v", currents)

		By("team-a learns why it waits: runs queued for a worker slot, Throttled (forks by reference take no copy slot)")
		Eventually(func(g Gomega) []string {
			events := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, events, client.InNamespace(teamA))).To(Succeed())
			var reasons []string
			for _, e := range events.Items {
				reasons = append(reasons, e.Reason)
			}
			return reasons
		}).Should(ContainElements(turnlogv1.EventWorkQueued, turnlogv1.EventThrottled))

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

// localRunBuckets is the cumulative count of each bucket of the local
// worker runs' lengths, every task together.
func localRunBuckets() map[float64]uint64 {
	GinkgoHelper()
	out := map[float64]uint64{}
	for _, task := range []derived.Task{derived.TaskAssemble, derived.TaskReplay} {
		var m dto.Metric
		Expect(localRunSeconds.WithLabelValues(string(task)).(prometheus.Metric).Write(&m)).To(Succeed())
		for _, b := range m.GetHistogram().GetBucket() {
			out[b.GetUpperBound()] += b.GetCumulativeCount()
		}
		out[math.Inf(1)] += m.GetHistogram().GetSampleCount()
	}
	return out
}

// longestRunSince bounds the longest local run since before was taken:
// the upper bound of the smallest bucket that holds every run since.
func longestRunSince(before map[float64]uint64) time.Duration {
	GinkgoHelper()
	after := localRunBuckets()
	total := after[math.Inf(1)] - before[math.Inf(1)]
	if total == 0 {
		return 0
	}
	bounds := slices.Sorted(maps.Keys(after))
	for _, ub := range bounds {
		if after[ub]-before[ub] == total {
			Expect(ub).NotTo(BeNumerically("==", math.Inf(1)), "a local run longer than the largest bucket")
			return time.Duration(ub * float64(time.Second))
		}
	}
	return 0
}
