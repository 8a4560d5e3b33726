package controllers

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/worker"
	"github.com/turnlog/turnlog/internal/workerpool"
)

// Pool worker mode. envtest has no kubelet and no Deployment controller,
// so the worker Deployments the manager keeps never get pods: the specs
// play them, as goroutines that do what `turnlog worker serve` does. Each
// takes its credentials from the namespace's Secret turnlog-worker and its
// endpoint from the Deployment's command line, leases runs from the
// manager over HTTPS and runs each command line it is handed on the store
// by URL, as a pod with the store credentials would.
var _ = Describe("Session controller with worker pods", Ordered, func() {
	const (
		idle  = 3 * time.Second
		image = "ghcr.io/turnlog/turnlog:test"
	)
	var (
		// nsA is for one Session's turns and for isolation, nsB for backlog
		// and idleness, nsC for runs whose pods hold them or stop answering.
		nsA, nsB, nsC string
		stores        *BucketCache
		sio           *SessionIO
		stop          func()
		settings      PoolSettings
		tokens        workerpool.Tokens
		pods          []*poolPod
	)

	BeforeAll(func() {
		nsA, nsB, nsC = newNamespace("pool-a"), newNamespace("pool-b"), newNamespace("pool-c")
		stores = storesAt("file://" + GinkgoT().TempDir())
		sio = &SessionIO{Client: k8sClient, Stores: stores}
		certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
		Expect(err).NotTo(HaveOccurred())
		key := make([]byte, 32)
		_, err = rand.Read(key)
		Expect(err).NotTo(HaveOccurred())
		port := poolFreePort()
		settings = PoolSettings{
			Image: image, ServiceAccount: "turnlog-worker", CredentialsSecret: "store-credentials",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
			Endpoint:  fmt.Sprintf("https://127.0.0.1:%d", port), Listen: fmt.Sprintf("127.0.0.1:%d", port),
			CertPEM: certPEM, KeyPEM: keyPEM, Key: key, RunsPerPod: 1, IdleTimeout: idle,
		}
		tokens = workerpool.Tokens{Key: key}
		stop = startManagerIn([]string{nsA, nsB, nsC}, Config{
			Stores: stores, WorkerMode: WorkerModePod, PollInterval: time.Hour,
			Limits: Limits{NamespaceWorkerRuns: 2}, Pool: settings,
		})
		// The endpoint answers before any spec plays a pod, so that no pod
		// starts in a retry backoff.
		probe, err := workerpool.NewClient(settings.Endpoint, nsA, "probe", tokens.Token(nsA), certPEM)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error {
			_, _, err := probe.Lease(ctx, time.Millisecond)
			return err
		}).Should(Succeed())
	})
	AfterAll(func() {
		for _, p := range pods {
			p.stop()
		}
		stop()
		Expect(stores.Close()).To(Succeed())
	})

	deployment := func(g Gomega, ns string) *appsv1.Deployment {
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "turnlog-worker"}, d)).To(Succeed())
		return d
	}
	secret := func(g Gomega, ns string) *corev1.Secret {
		s := &corev1.Secret{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "turnlog-worker"}, s)).To(Succeed())
		return s
	}
	// playPod starts a worker pod of ns as the Deployment and Secret there
	// describe it; hold, if set, is called before each run.
	playPod := func(ns, name string, hold func(ctx context.Context, args []string)) *poolPod {
		GinkgoHelper()
		var d *appsv1.Deployment
		var s *corev1.Secret
		Eventually(func(g Gomega) {
			d, s = deployment(g, ns), secret(g, ns)
		}).Should(Succeed())
		args := d.Spec.Template.Spec.Containers[0].Args
		Expect(args[:2]).To(Equal([]string{"worker", "serve"}))
		var endpoint string
		for _, a := range args[2:] {
			if v, ok := strings.CutPrefix(a, "--endpoint="); ok {
				endpoint = v
			}
		}
		Expect(args).To(ContainElement("--namespace=" + ns))
		p := startPoolPod(endpoint, ns, name, string(s.Data["token"]), s.Data["ca.crt"], hold)
		pods = append(pods, p)
		return p
	}
	noJobs := func(ns string) {
		GinkgoHelper()
		jobs := &batchv1.JobList{}
		Expect(k8sClient.List(ctx, jobs, client.InNamespace(ns))).To(Succeed())
		Expect(jobs.Items).To(BeEmpty(), "pool mode creates no Job")
	}

	It("does an appended turn's work on a worker pod of the Session's namespace, with no Job, and gives the pods no Kubernetes credentials", func() {
		_, _, err := sio.Import(ctx, nsA, "pooled", strings.NewReader(poolSessionStart))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			s := getSession(nsA, "pooled")(g)
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("False/WorkPending"))
			g.Expect(readyMessage(s)).To(MatchRegexp(`^assemble run pooled-assemble-[0-9a-f]{10} waits for a worker pod of namespace %s$`, nsA))
			g.Expect(s.Status.Worker).NotTo(BeNil())
			g.Expect(s.Status.Worker.Pod).To(BeEmpty())
		}).Should(Succeed())
		_, _, err = sio.Append(ctx, nsA, "pooled", strings.NewReader(poolTurn(1)))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) *int64 { return getSession(nsA, "pooled")(g).Status.HeadSeq }).Should(HaveValue(Equal(int64(6))))

		By("the namespace getting a worker Deployment and its Secret while no pod runs")
		var d *appsv1.Deployment
		Eventually(func(g Gomega) { d = deployment(g, nsA) }).Should(Succeed())
		Expect(d.Labels).To(HaveKeyWithValue("turnlog.dev/worker-pool", "true"))
		Expect(d.Spec.Replicas).To(HaveValue(BeNumerically(">=", 1)))
		Expect(d.Spec.Replicas).To(HaveValue(BeNumerically("<=", 2)))
		Expect(d.Spec.Strategy.Type).To(Equal(appsv1.RecreateDeploymentStrategyType))
		Expect(d.Spec.Template.Annotations).To(HaveKey("turnlog.dev/worker-config"))
		pod := d.Spec.Template.Spec
		Expect(pod.AutomountServiceAccountToken).To(Equal(ptr.To(false)))
		Expect(pod.ServiceAccountName).To(Equal("turnlog-worker"))
		Expect(pod.EnableServiceLinks).To(Equal(ptr.To(false)))
		Expect(pod.SecurityContext.RunAsNonRoot).To(Equal(ptr.To(true)))
		Expect(pod.SecurityContext.SeccompProfile).NotTo(BeNil())
		Expect(pod.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
		Expect(pod.Volumes).To(BeEmpty())
		Expect(pod.Containers).To(HaveLen(1))
		c := pod.Containers[0]
		Expect(c.Image).To(Equal(image))
		Expect(c.Args).To(Equal([]string{"worker", "serve", "--endpoint=" + settings.Endpoint, "--namespace=" + nsA, "--runs=1"}))
		Expect(c.SecurityContext.RunAsNonRoot).To(Equal(ptr.To(true)))
		Expect(c.SecurityContext.AllowPrivilegeEscalation).To(Equal(ptr.To(false)))
		Expect(c.SecurityContext.ReadOnlyRootFilesystem).To(Equal(ptr.To(true)))
		Expect(c.SecurityContext.Capabilities.Drop).To(Equal([]corev1.Capability{"ALL"}))
		Expect(c.SecurityContext.Privileged).To(BeNil())
		Expect(c.Resources.Limits.Memory().String()).To(Equal("256Mi"))
		fromSecret := func(key string) *corev1.EnvVarSource {
			return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "turnlog-worker"}, Key: key}}
		}
		Expect(c.Env).To(ContainElements(
			corev1.EnvVar{Name: worker.EnvToken, ValueFrom: fromSecret("token")},
			corev1.EnvVar{Name: worker.EnvCA, ValueFrom: fromSecret("ca.crt")},
			HaveField("Name", worker.EnvPod),
		))
		Expect(c.EnvFrom).To(ConsistOf(HaveField("SecretRef.Name", "store-credentials")))
		Expect(d.Spec.Selector.MatchLabels).To(Equal(d.Spec.Template.Labels))

		s := secret(Default, nsA)
		Expect(s.Labels).To(HaveKeyWithValue("turnlog.dev/worker-pool", "true"))
		Expect(s.Data).To(HaveLen(2))
		Expect(string(s.Data["token"])).To(Equal(tokens.Token(nsA)))
		Expect(tokens.Valid(nsB, string(s.Data["token"]))).To(BeFalse(), "namespace A's token holds only namespace A")
		Expect(s.Data["ca.crt"]).To(Equal(settings.CertPEM))

		By("a worker pod taking the runs")
		worker1 := playPod(nsA, "turnlog-worker-a1", nil)
		var s1 *turnlogv1.Session
		Eventually(func(g Gomega) { s1 = poolCurrent(g, nsA, "pooled", 6) }).Should(Succeed())
		Expect(s1.Status.Turns).To(Equal(int64(1)))
		Expect(s1.Status.Replay.Native).To(Equal(int64(1)))
		Expect(worker1.tasks()).To(ContainElements("assemble", "replay"))
		noJobs(nsA)
	})

	It("follows turns appended one after another on the same pods, still with no Job", func() {
		worker1 := pods[0]
		before := len(worker1.tasks())
		for turn := 2; turn <= 6; turn++ {
			head := int64(6 * turn)
			_, _, err := sio.Append(ctx, nsA, "pooled", strings.NewReader(poolTurn(turn)))
			Expect(err).NotTo(HaveOccurred())
			Eventually(func(g Gomega) {
				s := poolCurrent(g, nsA, "pooled", head)
				g.Expect(s.Status.Turns).To(Equal(int64(turn)))
				g.Expect(s.Status.Replay.Native).To(Equal(int64(turn)))
			}).Should(Succeed(), "turn %d", turn)
		}
		Expect(len(worker1.tasks())-before).To(BeNumerically(">=", 10), "an assembly and a replay per turn")
		Expect(worker1.failures()).To(BeEmpty())
		Expect(sessionEvents(nsA, "pooled", turnlogv1.EventWorkerFailed)(Default)).To(BeEmpty())
		noJobs(nsA)
		worker1.stop()
	})

	It("scales a namespace's worker pods with its backlog, up to --namespace-worker-runs", func() {
		for i := range 4 {
			_, _, err := sio.Import(ctx, nsB, fmt.Sprintf("backlog-%d", i), strings.NewReader(poolSessionStart+poolTurn(1)))
			Expect(err).NotTo(HaveOccurred())
		}
		Eventually(func(g Gomega) {
			for i := range 4 {
				s := getSession(nsB, fmt.Sprintf("backlog-%d", i))(g)
				g.Expect(readyMessage(s)).To(HaveSuffix("waits for a worker pod of namespace " + nsB))
			}
		}).Should(Succeed())
		Eventually(func(g Gomega) *int32 { return deployment(g, nsB).Spec.Replicas }).Should(HaveValue(Equal(int32(2))))
		Consistently(func(g Gomega) *int32 { return deployment(g, nsB).Spec.Replicas }, "3s", "200ms").Should(HaveValue(Equal(int32(2))))
		fams := gatherMetrics(Default)
		Expect(series(fams, "turnlog_worker_pods", nsB)).To(Equal(map[string]float64{"": 2}))
		Expect(series(fams, "turnlog_worker_runs_waiting", nsB)).To(Equal(map[string]float64{"": 4}))
		Expect(series(fams, "turnlog_worker_runs_in_flight", nsB)).To(Equal(map[string]float64{"": 0}))

		By("two pods working the backlog off")
		playPod(nsB, "turnlog-worker-b1", nil)
		playPod(nsB, "turnlog-worker-b2", nil)
		Eventually(func(g Gomega) {
			if d := (&appsv1.Deployment{}); k8sClient.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "turnlog-worker"}, d) == nil {
				g.Expect(d.Spec.Replicas).To(HaveValue(BeNumerically("<=", 2)))
			}
			for i := range 4 {
				poolCurrent(g, nsB, fmt.Sprintf("backlog-%d", i), 6)
			}
		}, "60s").Should(Succeed())
		noJobs(nsB)
	})

	It("removes a namespace's worker Deployment and Secret once it has been idle for the idle timeout, and brings them back with new work", func() {
		b1, b2 := pods[1], pods[2]
		Expect(len(b1.tasks())+len(b2.tasks())).To(BeNumerically(">=", 8), "4 Sessions' assemblies and replays")
		lastRun := time.Unix(0, max(b1.lastEnd.Load(), b2.lastEnd.Load()))
		Eventually(func(g Gomega) {
			err := k8sClient.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "turnlog-worker"}, &appsv1.Deployment{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Deployment: %v", err)
			err = k8sClient.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "turnlog-worker"}, &corev1.Secret{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Secret: %v", err)
		}, "30s").Should(Succeed())
		Expect(time.Since(lastRun)).To(BeNumerically(">=", idle), "kept for the idle timeout after the last run")
		for i := range 4 {
			poolCurrent(Default, nsB, fmt.Sprintf("backlog-%d", i), 6)
		}

		By("the manager leaving the idle namespaces alone once their pods are removed")
		deletes := poolDeletesOfNothing()
		Consistently(func(g Gomega) {
			g.Expect(poolDeletesOfNothing()-deletes).To(BeZero(), "DELETE requests of objects that are not there")
			fams := gatherMetrics(g)
			for _, name := range []string{"turnlog_worker_pods", "turnlog_worker_runs_waiting", "turnlog_worker_runs_in_flight"} {
				g.Expect(series(fams, name, nsB)).To(BeEmpty(), "%s of a namespace without worker pods", name)
			}
		}, "3s", "100ms").Should(Succeed())

		By("a turn appended to an idle namespace")
		_, _, err := sio.Append(ctx, nsB, "backlog-0", strings.NewReader(poolTurn(2)))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			g.Expect(deployment(g, nsB).Spec.Replicas).To(HaveValue(Equal(int32(1))))
			g.Expect(string(secret(g, nsB).Data["token"])).To(Equal(tokens.Token(nsB)))
		}).Should(Succeed())
		Eventually(func(g Gomega) { poolCurrent(g, nsB, "backlog-0", 12) }).Should(Succeed())
		b1.stop()
		b2.stop()
	})

	It("does a run again on another pod when its pod stops answering, and shows the pod a long run is on", func() {
		_, _, err := sio.Import(ctx, nsC, "long", strings.NewReader(poolSessionStart+poolTurn(1)))
		Expect(err).NotTo(HaveOccurred())
		var template corev1.PodTemplateSpec
		Eventually(func(g Gomega) { template = deployment(g, nsC).Spec.Template }).Should(Succeed())

		By("a pod that takes a run and then stops answering")
		dead := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: nsC, Name: "turnlog-worker-dead", Labels: template.Labels}, Spec: template.Spec}
		Expect(k8sClient.Create(ctx, dead)).To(Succeed())
		hung, err := workerpool.NewClient(settings.Endpoint, nsC, dead.Name, string(secret(Default, nsC).Data["token"]), settings.CertPEM)
		Expect(err).NotTo(HaveOccurred())
		lease, ok, err := hung.Lease(ctx, 20*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		leasedAt := time.Now()
		Expect(lease.Args[:2]).To(Equal([]string{"worker", "assemble"}))
		Expect(lease.Args).To(ContainElement("--namespace=" + nsC))
		Eventually(func(g Gomega) {
			s := getSession(nsC, "long")(g)
			g.Expect(s.Status.Worker).NotTo(BeNil())
			g.Expect(s.Status.Worker.Name).To(Equal(lease.Name))
			g.Expect(s.Status.Worker.Pod).To(Equal(dead.Name))
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("False/WorkPending"))
			g.Expect(readyMessage(s)).To(Equal(fmt.Sprintf("assemble run %s is running on worker pod %s", lease.Name, dead.Name)))
		}).Should(Succeed())

		By("another pod doing the run once the lease has run out")
		var slowNext atomic.Bool
		release := make(chan struct{})
		live := playPod(nsC, "turnlog-worker-c1", func(ctx context.Context, _ []string) {
			if slowNext.CompareAndSwap(true, false) {
				select {
				case <-release:
				case <-ctx.Done():
				case <-time.After(time.Minute):
				}
			}
		})
		var reasons []string
		Eventually(func(g Gomega) {
			s := getSession(nsC, "long")(g)
			if c := apimeta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady); c != nil && !slices.Contains(reasons, c.Reason) {
				reasons = append(reasons, c.Reason)
			}
			if s.Status.Worker != nil {
				g.Expect(s.Status.Worker.Failures).To(BeZero(), "a lost lease is not a failure")
			}
			poolCurrent(g, nsC, "long", 6)
		}, "60s").Should(Succeed())
		Expect(time.Since(leasedAt)).To(BeNumerically(">=", workerpool.DefaultLeaseTimeout), "done again only once the lease ran out")
		Expect(reasons).NotTo(ContainElement(BeElementOf(turnlogv1.ReasonWorkerFailed, turnlogv1.ReasonWorkerFailedPermanently)))
		Expect(live.tasks()).To(Equal([]string{"assemble", "replay"}))
		Expect(sessionEvents(nsC, "long", turnlogv1.EventWorkerFailed)(Default)).To(BeEmpty())
		// The pod that stopped answering is deleted, for its Deployment to
		// replace, and holds the run no more if it comes back.
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(dead), &corev1.Pod{}))
		}).Should(BeTrue())
		Expect(hung.Heartbeat(ctx, lease.ID)).To(MatchError(workerpool.ErrGone))
		Expect(hung.Finish(ctx, lease.ID, workerpool.Result{OK: true, Message: "{}"})).To(MatchError(workerpool.ErrGone))
		poolCurrent(Default, nsC, "long", 6)

		By("a run that takes a while")
		slowNext.Store(true)
		_, _, err = sio.Append(ctx, nsC, "long", strings.NewReader(poolTurn(2)))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			s := getSession(nsC, "long")(g)
			g.Expect(s.Status.Worker).NotTo(BeNil())
			g.Expect(s.Status.Worker.Pod).To(Equal(live.name))
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("False/WorkPending"))
			g.Expect(readyMessage(s)).To(Equal(fmt.Sprintf("assemble run %s is running on worker pod %s", s.Status.Worker.Name, live.name)))
		}).Should(Succeed())
		close(release)
		Eventually(func(g Gomega) { poolCurrent(g, nsC, "long", 12) }).Should(Succeed())
		Expect(live.failures()).To(BeEmpty())
		noJobs(nsC)
	})

	It("gives each namespace's token that namespace's runs and no other's", func() {
		_, _, err := sio.Import(ctx, nsA, "guarded", strings.NewReader(poolSessionStart+poolTurn(1)))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) string {
			return readyMessage(getSession(nsA, "guarded")(g))
		}).Should(HaveSuffix("waits for a worker pod of namespace " + nsA))

		By("a pod of namespace B asking for namespace A's runs with its own token")
		intruder, err := workerpool.NewClient(settings.Endpoint, nsA, "intruder", tokens.Token(nsB), settings.CertPEM)
		Expect(err).NotTo(HaveOccurred())
		_, ok, err := intruder.Lease(ctx, time.Second)
		Expect(err).To(MatchError(workerpool.ErrUnauthorized))
		Expect(ok).To(BeFalse())
		Expect(intruder.Heartbeat(ctx, "anything")).To(MatchError(workerpool.ErrUnauthorized))
		Expect(intruder.Finish(ctx, "anything", workerpool.Result{OK: true})).To(MatchError(workerpool.ErrUnauthorized))

		By("a token made with another key")
		forged, err := workerpool.NewClient(settings.Endpoint, nsA, "forged", workerpool.Tokens{Key: []byte("not the manager's key")}.Token(nsA), settings.CertPEM)
		Expect(err).NotTo(HaveOccurred())
		_, _, err = forged.Lease(ctx, time.Second)
		Expect(err).To(MatchError(workerpool.ErrUnauthorized))

		By("a pod of namespace B asking for its own runs")
		neighbour, err := workerpool.NewClient(settings.Endpoint, nsB, "neighbour", tokens.Token(nsB), settings.CertPEM)
		Expect(err).NotTo(HaveOccurred())
		_, ok, err = neighbour.Lease(ctx, time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "namespace A's run is not handed to namespace B")

		By("namespace A's pod doing it")
		playPod(nsA, "turnlog-worker-a2", nil)
		Eventually(func(g Gomega) { poolCurrent(g, nsA, "guarded", 6) }).Should(Succeed())
		noJobs(nsA)
	})
})

// poolSessionStart and poolTurn make a log: its session/start, and turn n,
// answered natively, as seqs 6n-5..6n.
const poolSessionStart = `{"seq":0,"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}}` + "\n"

func poolTurn(n int) string {
	seq := 6*n - 5
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line(`{"seq":%d,"type":"turn/start","turn":%d}`, seq, n)
	line(`{"seq":%d,"type":"user/message","turn":%d,"content":[{"type":"text","text":"question %d"}]}`, seq+1, n, n)
	line(`{"seq":%d,"type":"response/start","turn":%d,"response":0,"adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}}`, seq+2, n)
	line(`{"seq":%d,"type":"chunk","turn":%d,"response":0,"block":0,"delta":{"type":"text","text":"answer %d"}}`, seq+3, n, n)
	line(`{"seq":%d,"type":"response/finish","turn":%d,"response":0,"stopReason":"stop","replayState":{"kind":"pi-ai","version":2,"response":{"id":"msg_%d","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"},"blocks":[{"type":"text","signature":"txt_%d"}]}}`, seq+4, n, n, n)
	line(`{"seq":%d,"type":"turn/end","turn":%d,"reason":"stop"}`, seq+5, n)
	return b.String()
}

// poolCurrent asserts that the Session is Ready and Current through head,
// its assembly and replay included, with no run going.
func poolCurrent(g Gomega, ns, name string, head int64) *turnlogv1.Session {
	s := getSession(ns, name)(g)
	g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/Current"), "%s", readyMessage(s))
	g.Expect(s.Status.ObservedGeneration).To(Equal(s.Generation))
	g.Expect(s.Status.HeadSeq).To(HaveValue(Equal(head)))
	g.Expect(s.Status.AssembledThroughSeq).To(HaveValue(Equal(head)))
	g.Expect(s.Status.Replay).NotTo(BeNil())
	g.Expect(s.Status.Replay.ThroughSeq).To(Equal(head))
	g.Expect(s.Status.Worker).To(BeNil())
	return s
}

func readyMessage(s *turnlogv1.Session) string {
	if c := apimeta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady); c != nil {
		return c.Message
	}
	return ""
}

// poolDeletesOfNothing counts the DELETE requests this process's clients
// made that found nothing to delete.
func poolDeletesOfNothing() float64 {
	GinkgoHelper()
	return counterTotal("rest_client_requests_total", map[string]string{"method": "DELETE", "code": "404"})
}

// poolFreePort is a port on 127.0.0.1 nothing listens on.
func poolFreePort() int {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// poolPod is a worker pod a spec plays: workerpool.Serve, as `turnlog
// worker serve` runs it, in a goroutine.
type poolPod struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	// lastEnd is when its last run ended (UnixNano).
	lastEnd atomic.Int64

	mu       sync.Mutex
	ran      []string
	failed   []string
	serveErr error
}

// startPoolPod starts a pod of namespace ns dialling endpoint with token,
// trusting ca; hold, if set, is called before each run with the run's
// context.
func startPoolPod(endpoint, ns, name, token string, ca []byte, hold func(ctx context.Context, args []string)) *poolPod {
	GinkgoHelper()
	c, err := workerpool.NewClient(endpoint, ns, name, token, ca)
	Expect(err).NotTo(HaveOccurred())
	pctx, cancel := context.WithCancel(ctx)
	p := &poolPod{name: name, cancel: cancel, done: make(chan struct{})}
	execute := func(ctx context.Context, args []string) (string, error) {
		if hold != nil {
			hold(ctx, args)
		}
		defer p.lastEnd.Store(time.Now().UnixNano())
		msg, err := poolExecute(ctx, ns, args)
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			p.failed = append(p.failed, err.Error())
		} else {
			p.ran = append(p.ran, args[1])
		}
		return msg, err
	}
	go func() {
		defer close(p.done)
		err := workerpool.Serve(pctx, c, workerpool.ServeOptions{
			Execute: execute,
			Logf: func(format string, args ...any) {
				fmt.Fprintf(GinkgoWriter, "pod %s/%s: %s\n", ns, name, fmt.Sprintf(format, args...))
			},
		})
		p.mu.Lock()
		p.serveErr = err
		p.mu.Unlock()
	}()
	return p
}

// poolExecute is what a worker pod does with a command line it leased.
func poolExecute(ctx context.Context, ns string, args []string) (string, error) {
	if len(args) < 2 || args[0] != "worker" {
		return "", fmt.Errorf("not a worker command line: %q", args)
	}
	var usage strings.Builder
	inv, err := worker.ParseArgs(args[1:], &usage)
	if err != nil {
		return "", fmt.Errorf("worker command line %q: %s", args, strings.TrimSpace(usage.String()))
	}
	if inv.Location.Namespace != ns {
		return "", fmt.Errorf("a run of namespace %s handed to a pod of namespace %s", inv.Location.Namespace, ns)
	}
	sum, err := worker.Execute(ctx, inv, worker.OpenStore)
	if err != nil {
		return "", err
	}
	data, err := json.Marshal(sum)
	return string(data), err
}

// tasks are the tasks of the runs the pod did.
func (p *poolPod) tasks() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ran)
}

func (p *poolPod) failures() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.failed)
}

// stop stops the pod as a scale-down does: it finishes the run it holds,
// if any, and asks for no more.
func (p *poolPod) stop() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
	})
}
