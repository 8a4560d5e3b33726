package controllers

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
)

// An outage stays where it happens: namespace A keeps 20 Sessions on a
// store whose endpoint refuses connections and 20 on one that accepts them
// and never answers, while namespace B, on a healthy store, appends and
// forks. B's appends reach Current and its forks succeed about as fast as
// before the outage (the figures are printed, and bounded only
// generously); A's Sessions all say StoreUnavailable within a minute, and
// the dead store's Sessions recover on their own when it comes back, with
// nothing lost.
var _ = Describe("One store's outage", Ordered, func() {
	const perStore = 20
	var (
		nsA, nsB string
		stores   *BucketCache
		sio      *SessionIO
		dead     *tcpProxy
		stop     func()
	)
	BeforeAll(func() {
		nsA, nsB = newNamespace("outage"), newNamespace("bystander")
		s3 := versitygw.Start(GinkgoT())
		// The dead store is the same server behind a proxy that can stop
		// listening: connections are then refused, as by a store whose
		// server is down.
		dead = startTCPProxy(s3.Addr())
		DeferCleanup(dead.close)
		var err error
		stores, err = NewBucketCache([]StoreConfig{
			{Name: turnlogv1.DefaultStore, URL: s3.URL},
			{Name: "dead", URL: s3.URLVia(dead.addr), Prefix: "dead"},
			{Name: "hanging", URL: hangingS3()},
		}, s3.Options())
		Expect(err).NotTo(HaveOccurred())
		sio = &SessionIO{Client: k8sClient, Stores: stores}
		// The defaults a cluster runs with, but for the poll: a Session
		// current with its log looks at it every 5s, so that an outage of
		// a quiet store is noticed in the spec's time.
		stop = startManagerIn([]string{nsA, nsB}, Config{
			Stores: stores, WorkerMode: WorkerModeLocal,
			PollInterval: 5 * time.Second, MaxPollInterval: 5 * time.Second,
		})
	})
	AfterAll(func() {
		stop()
		Expect(stores.Close()).To(Succeed())
	})

	createOn := func(ns, name, storeName string, turnCount int) *turnlogv1.Session {
		GinkgoHelper()
		s := &turnlogv1.Session{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       turnlogv1.SessionSpec{Storage: turnlogv1.SessionStorage{Store: storeName}},
		}
		Expect(k8sClient.Create(ctx, s)).To(Succeed())
		if turnCount > 0 {
			_, err := appenderOf(stores, s).Append(ctx, turns(1, turnCount)...)
			Expect(err).NotTo(HaveOccurred())
			Expect(sessionio.Nudge(ctx, k8sClient, types.NamespacedName{Namespace: ns, Name: name}, nil)).To(Succeed())
		}
		return s
	}

	// b is namespace B's Session, appended to turn by turn.
	var b *turnlogv1.Session
	turn := 1
	appendToCurrent := func() time.Duration {
		GinkgoHelper()
		turn++
		head, err := appenderOf(stores, b).Append(ctx, turns(turn, 1)...)
		Expect(err).NotTo(HaveOccurred())
		start := time.Now()
		Expect(sessionio.Nudge(ctx, k8sClient, types.NamespacedName{Namespace: nsB, Name: b.Name}, nil)).To(Succeed())
		Eventually(func(g Gomega) {
			s := getSession(nsB, b.Name)(g)
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/Current"))
			g.Expect(s.Status.Replay).NotTo(BeNil())
			g.Expect(s.Status.Replay.ThroughSeq).To(BeNumerically(">=", head))
		}).WithTimeout(5 * time.Minute).WithPolling(20 * time.Millisecond).Should(Succeed())
		return time.Since(start)
	}
	forks := 0
	forkToSucceeded := func() time.Duration {
		GinkgoHelper()
		forks++
		name := fmt.Sprintf("fork-%d", forks)
		start := time.Now()
		Expect(k8sClient.Create(ctx, newFork(nsB, name, b.Name, "1"))).To(Succeed())
		Eventually(func(g Gomega) string {
			return cond(getFork(nsB, name)(g).Status.Conditions, turnlogv1.ConditionSucceeded)
		}).WithTimeout(5 * time.Minute).WithPolling(20 * time.Millisecond).Should(Equal("True/Forked"))
		return time.Since(start)
	}
	measure := func(n int) (appends, forked []time.Duration) {
		for range n {
			appends = append(appends, appendToCurrent())
		}
		forked = append(forked, forkToSucceeded())
		return appends, forked
	}

	It("keeps the healthy store's Sessions going, says StoreUnavailable within a minute, and recovers without a nudge", func() {
		By("namespace B on the healthy store, and A's Sessions on the store that will die, all current")
		b = createOn(nsB, "bystander", "", 1)
		for i := range perStore {
			createOn(nsA, fmt.Sprintf("dead-%02d", i), "dead", 2)
		}
		waitReady(nsB, b.Name)
		for i := range perStore {
			waitReady(nsA, fmt.Sprintf("dead-%02d", i))
		}
		quietAppends, quietForks := measure(5)

		By("the dead store's server goes down; 20 more Sessions of A on a store that never answers")
		down := time.Now()
		dead.stop()
		for i := range perStore {
			createOn(nsA, fmt.Sprintf("hanging-%02d", i), "hanging", 0)
		}
		outageAppends, outageForks := measure(5)

		By("every Session of A says StoreUnavailable, naming its store")
		var unavailableAfter time.Duration
		Eventually(func(g Gomega) {
			var list turnlogv1.SessionList
			g.Expect(k8sClient.List(ctx, &list, client.InNamespace(nsA))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(2 * perStore))
			for _, s := range list.Items {
				c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady)
				g.Expect(c).NotTo(BeNil(), s.Name)
				g.Expect(c.Reason).To(Equal(turnlogv1.ReasonStoreUnavailable), s.Name)
				g.Expect(c.Message).To(ContainSubstring(fmt.Sprintf("store %q", s.Spec.Storage.Store)), s.Name)
			}
			unavailableAfter = time.Since(down)
		}).WithTimeout(3 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		Expect(testutil.ToFloat64(storeBreakerState.WithLabelValues("dead"))).To(BeNumerically(">", float64(store.BreakerClosed)),
			"the dead store's breaker is not closed")
		Expect(testutil.ToFloat64(storeFailures.WithLabelValues("dead", "unavailable"))).To(BeNumerically(">", 0))
		Expect(testutil.ToFloat64(storeFailures.WithLabelValues("hanging", "timeout"))).To(BeNumerically(">", 0))

		By("A's Sessions waiting for their stores, not each retrying: no failed reconcile in 20s of the outage")
		failedBefore := reconcileErrors("session")
		time.Sleep(20 * time.Second)
		failedDuring := reconcileErrors("session") - failedBefore
		Expect(failedDuring).To(BeNumerically("<=", 2),
			"failed reconciles of Sessions in 20s with %d Sessions on two stores whose breakers are open (each a \"Reconciler error\" in the manager's log)", 2*perStore)

		By("the dead store comes back: its Sessions recover on their own")
		dead.start()
		back := time.Now()
		var recoveredAfter time.Duration
		Eventually(func(g Gomega) {
			for i := range perStore {
				s := getSession(nsA, fmt.Sprintf("dead-%02d", i))(g)
				g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/Current"), s.Name)
			}
			recoveredAfter = time.Since(back)
		}).WithTimeout(3 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		for i := range perStore {
			name := fmt.Sprintf("dead-%02d", i)
			log := exportLog(sio, nsA, name)
			Expect(strings.Count(log, "\n")).To(Equal(len(turns(1, 2))), "the log of %s", name)
			Expect(log).To(ContainSubstring(`"text":"answer 2"`), "the log of %s", name)
			s := getSession(nsA, name)(Default)
			Expect(s.Status.Replay.ThroughSeq).To(Equal(int64(8)), name)
		}
		Expect(testutil.ToFloat64(storeBreakerState.WithLabelValues("dead"))).To(Equal(float64(store.BreakerClosed)))

		By("the figures")
		report := fmt.Sprintf("a healthy store's Sessions while two others fail: append -> Current median %s (max %s) before the outage, %s (max %s) during it; fork -> Succeeded %s before, %s during; every Session of the failing stores StoreUnavailable %s after the kill; the dead store's Sessions Current again %s after it came back",
			median(quietAppends), slices.Max(quietAppends), median(outageAppends), slices.Max(outageAppends),
			quietForks[0].Round(time.Millisecond), outageForks[0].Round(time.Millisecond),
			unavailableAfter.Round(time.Millisecond), recoveredAfter.Round(time.Millisecond))
		GinkgoWriter.Println(report)
		AddReportEntry("store outage", report)
		// A generous bound, not a benchmark: without the breaker, each look
		// at a Session of A held a reconcile for up to --store-timeout.
		Expect(median(outageAppends)).To(BeNumerically("<", median(quietAppends)+10*time.Second))
		Expect(outageForks[0]).To(BeNumerically("<", quietForks[0]+20*time.Second))
	})
})

// reconcileErrors is controller's failed reconciles so far
// (controller_runtime_reconcile_errors_total), each a "Reconciler error"
// in the manager's log.
func reconcileErrors(controller string) float64 {
	GinkgoHelper()
	return counterTotal("controller_runtime_reconcile_errors_total", map[string]string{"controller": controller})
}

// counterTotal sums the series of the counter name in this process's
// metrics registry whose labels include match.
func counterTotal(name string, match map[string]string) float64 {
	GinkgoHelper()
	fams, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	n := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if matchesLabels(labels, match) {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// matchesLabels: labels has every label of match, with its value.
func matchesLabels(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// hangingS3 is the URL of an S3 endpoint that accepts connections and
// never answers (a dead proxy, a stuck gateway), until the spec ends.
func hangingS3() string {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	DeferCleanup(func() {
		close(release)
		hung.Close()
	})
	return "s3://logs?region=us-east-1&use_path_style=true&disable_https=true&endpoint=" + hung.URL
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Millisecond)
}

// tcpProxy forwards connections to a server until stopped; stopped, it
// refuses them (nothing listens on its port) and has cut the open ones.
type tcpProxy struct {
	addr, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

func startTCPProxy(target string) *tcpProxy {
	GinkgoHelper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	p := &tcpProxy{addr: ln.Addr().String(), target: target, conns: map[net.Conn]bool{}}
	p.serve(ln)
	return p
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *tcpProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
}

func (p *tcpProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = true
	}
	return true
}

// stop closes the listener and every connection.
func (p *tcpProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// start listens again on the same address.
func (p *tcpProxy) start() {
	GinkgoHelper()
	var ln net.Listener
	Eventually(func() error {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		return err
	}).WithTimeout(10 * time.Second).Should(Succeed())
	p.serve(ln)
}

func (p *tcpProxy) close() { p.stop() }
