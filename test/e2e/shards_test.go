package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// The shards of the spec below, named apart from the chart's (0, 1, 2), so
// that the Sessions the chart's spec puts in its shards are never these
// managers'. The active manager of killedShard is killed and its standby
// takes over; the last namespace is pinned to pinnedShard.
var specShards = []string{"e2e-0", "e2e-1", "e2e-2"}

const (
	killedShard = "e2e-1"
	pinnedShard = "e2e-2"
	// shardNamespaces hold a Session each; the fork's child joins the
	// first.
	shardNamespaces = 6
)

// Shards where users run them: a `turnlog manager --shard=NAME` per shard,
// started as the suite starts its manager, with --leader-elect and a
// standby replica for one shard; config/shards applied with kubectl; hosts
// appending through agenthost; worker pods on the container node. The
// admission policy places each Session, each manager reconciles its shard
// alone, a fork crosses shards, and a shard whose active manager is
// SIGKILLed stalls its own Sessions only until its standby holds the
// Lease, with nothing lost.
var _ = Describe("shards of Sessions on three managers (container node)", func() {
	It("places Sessions by the policy, reconciles each in its shard alone, forks across shards, and recovers a killed shard on its standby", func(ctx SpecContext) {
		suite := needContainerNode()
		c := &shardedCluster{logDir: GinkgoT().TempDir(), kube: kubeClient(), active: map[string]*shardManager{}, shardOf: map[string]string{}}

		By("stopping the suite's manager, which reconciles every Session whatever its shard")
		Expect(suite.stop()).To(Succeed())
		DeferCleanup(func() { Expect(suite.start(workerImage)).To(Succeed()) })

		c.createNamespaces(ctx)
		c.store = openHostStore(ctx)
		c.installPolicy()
		c.startManagers(ctx)
		c.createSessions(ctx)
		c.expectPlacement()
		c.expectEachShardAlone(ctx)
		c.forkAcrossShards(ctx)
		c.killActiveManager(ctx)
	})
})

// shardedCluster is what the shards spec set up.
type shardedCluster struct {
	logDir string
	kube   client.WithWatch
	store  *agenthost.Store
	// leases is the namespace of the managers' Leases; namespaces the
	// Sessions'.
	leases     string
	namespaces []string
	active     map[string]*shardManager
	standby    *shardManager
	sessions   []*hostedSession
	// shardOf is the shard each Session must be in, by namespace/name.
	shardOf map[string]string
}

// shardManager is one `turnlog manager --shard=NAME` process.
type shardManager struct {
	*localManager
	shard       string
	metricsAddr string
}

// createNamespaces creates the Leases' namespace and the Sessions' (each
// with the store credentials Secret), the last pinned to pinnedShard.
func (c *shardedCluster) createNamespaces(ctx context.Context) {
	GinkgoHelper()
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	c.leases = "turnlog-e2e-shards-" + hex.EncodeToString(suffix)
	By("creating namespace " + c.leases + " for the Leases and " + c.leases + "-0 … -5 for the Sessions")
	kubectl("create", "namespace", c.leases)
	for i := range shardNamespaces {
		ns := fmt.Sprintf("%s-%d", c.leases, i)
		createStoreCredentials(ctx, ns)
		c.namespaces = append(c.namespaces, ns)
	}
	kubectl("label", "namespace", c.namespaces[shardNamespaces-1], turnlogv1.LabelShard+"="+pinnedShard)
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			c.printState()
		}
		for _, ns := range append([]string{c.leases}, c.namespaces...) {
			_, _ = tryKubectl("delete", "namespace", ns, "--wait=false")
		}
	})
}

// printState prints what explains a failure: the objects of the spec's
// namespaces, the worker pods' logs and the managers' logs.
func (c *shardedCluster) printState() {
	for _, ns := range c.namespaces {
		out, _ := tryKubectl("get", "sessions,sessionforks,deployments,pods", "-n", ns, "-o", "wide", "-L", turnlogv1.LabelShard)
		GinkgoWriter.Printf("\n--- kubectl get -n %s\n%s", ns, out)
		logs, _ := tryKubectl("logs", "-n", ns, "-l", poolWorkerLabel, "--prefix", "--tail=20")
		GinkgoWriter.Printf("--- worker pod logs\n%s", logs)
	}
	for _, m := range append(slices.Collect(maps.Values(c.active)), c.standby) {
		if m != nil {
			GinkgoWriter.Printf("\n--- %s\n%s\n", filepath.Base(m.logPath), m.logTail(80))
		}
	}
}

// installPolicy applies config/shards with kubectl, its list of shards
// edited to specShards (docs/scaling.md, "Turning shards on"), and waits
// until the API server applies it; it is removed when the spec ends.
func (c *shardedCluster) installPolicy() {
	GinkgoHelper()
	By("applying config/shards with kubectl, the shards of turnlog-shards edited to " + strings.Join(specShards, " "))
	rendered := kubectl("kustomize", filepath.Join(env.root, "config", "shards"))
	list := regexp.MustCompile(`(?m)^(\s+shards: ).*$`)
	Expect(list.MatchString(rendered)).To(BeTrue(), "no list of shards in config/shards:\n%s", rendered)
	rendered = list.ReplaceAllLiteralString(rendered, "  shards: "+strings.Join(specShards, " "))
	if _, err := tryKubectl("get", "namespace", "turnlog-system"); err != nil {
		kubectl("create", "namespace", "turnlog-system")
	}
	kubectlWithInput([]byte(rendered), "apply", "-n", "turnlog-system", "-f", "-")
	DeferCleanup(func() {
		By("removing the policy, so that no other spec's Session gets a shard")
		kubectlWithInput([]byte(rendered), "delete", "-n", "turnlog-system", "--ignore-not-found", "-f", "-")
		c.waitForPolicy(Not(ContainSubstring(turnlogv1.LabelShard)))
	})
	c.waitForPolicy(ContainSubstring(turnlogv1.LabelShard))
}

// waitForPolicy waits until the labels a Session created in a server-side
// dry run gets match labels.
func (c *shardedCluster) waitForPolicy(labels OmegaMatcher) {
	GinkgoHelper()
	probe := "apiVersion: turnlog.dev/v1alpha1\nkind: Session\nmetadata:\n  name: policy-probe\nspec: {}\n"
	Eventually(func() (string, error) {
		return tryKubectlWithInput([]byte(probe), "create", "-n", c.namespaces[0], "--dry-run=server", "-f", "-", "-o", "jsonpath={.metadata.labels}")
	}).Should(labels)
}

// startShardManager starts `turnlog manager --shard=shard --leader-elect`,
// serving its metrics over HTTP on a port of its own and its worker pods
// on another.
func (c *shardedCluster) startShardManager(shard, name string) *shardManager {
	GinkgoHelper()
	metricsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freeHostPort("127.0.0.1")))
	m := &shardManager{shard: shard, metricsAddr: metricsAddr, localManager: &localManager{
		bin:        env.turnlog,
		kubeconfig: env.kubeconfig,
		storeURL:   env.storeURL,
		logPath:    filepath.Join(c.logDir, name+".log"),
		workerAddr: net.JoinHostPort(env.cluster.NodeIP, strconv.Itoa(freeHostPort(env.cluster.NodeIP))),
		args: []string{"--worker-credentials-secret=" + workerCredentialsSecret, "--shard=" + shard,
			"--leader-elect", "--leader-election-namespace=" + c.leases,
			"--metrics-bind-address=" + metricsAddr, "--metrics-secure=false"},
	}}
	Expect(m.start(workerImage)).To(Succeed())
	return m
}

// stopManagers stops every manager of the spec at once (each waits for
// its worker pods' connections to close).
func (c *shardedCluster) stopManagers() {
	managers := slices.Collect(maps.Values(c.active))
	if c.standby != nil {
		managers = append(managers, c.standby)
	}
	errs := make(chan error, len(managers))
	for _, m := range managers {
		go func() { errs <- m.stop() }()
	}
	for range managers {
		Expect(<-errs).To(Succeed())
	}
}

// shardLease is the name of shard's Lease (docs/scaling.md).
func shardLease(shard string) string { return "turnlog-manager-shard-" + shard + ".turnlog.dev" }

// leads reports whether m's metrics say it holds its shard's Lease.
func (m *shardManager) leads(ctx context.Context) (bool, error) {
	samples, err := scrapeMetrics(ctx, m.metricsAddr)
	if err != nil {
		return false, err
	}
	return sumMetric(samples, "leader_election_master_status", map[string]string{"name": shardLease(m.shard), "shard": m.shard}) == 1, nil
}

// leaseHolder is the holder of shard's Lease and when it acquired it.
func (c *shardedCluster) leaseHolder(ctx context.Context, shard string) (string, time.Time, error) {
	lease, err := env.clientset.CoordinationV1().Leases(c.leases).Get(ctx, shardLease(shard), metav1.GetOptions{})
	if err != nil {
		return "", time.Time{}, err
	}
	var acquired time.Time
	if lease.Spec.AcquireTime != nil {
		acquired = lease.Spec.AcquireTime.Time
	}
	if lease.Spec.HolderIdentity == nil {
		return "", acquired, nil
	}
	return *lease.Spec.HolderIdentity, acquired, nil
}

// startManagers starts a manager per shard, each the leader of its
// shard's Lease, then a standby replica of killedShard.
func (c *shardedCluster) startManagers(ctx context.Context) {
	GinkgoHelper()
	By("starting turnlog manager --shard=NAME --leader-elect for each of " + strings.Join(specShards, ", "))
	DeferCleanup(c.stopManagers)
	for _, shard := range specShards {
		c.active[shard] = c.startShardManager(shard, "manager-"+shard)
	}
	for _, m := range c.active {
		Eventually(m.leads).WithContext(ctx).Should(BeTrue(), "the manager of shard %s leads", m.shard)
	}
	holder, _, err := c.leaseHolder(ctx, killedShard)
	Expect(err).NotTo(HaveOccurred())
	By("starting a standby replica of shard " + killedShard + ": the Lease stays with " + holder)
	c.standby = c.startShardManager(killedShard, "standby-"+killedShard)
	Eventually(c.standby.logSinceStart).Should(And(
		ContainSubstring("Attempting to acquire leader lease"), ContainSubstring(c.leases+"/"+shardLease(killedShard))))
	still, _, err := c.leaseHolder(ctx, killedShard)
	Expect(err).NotTo(HaveOccurred())
	Expect(still).To(Equal(holder))
}

// createSessions creates a Session in each namespace as a host does, named
// so that the policy's hash spreads them over the shards, two each (the
// last namespace's by its pin, against the hash of its Session's name),
// and streams two turns into each.
func (c *shardedCluster) createSessions(ctx context.Context) {
	GinkgoHelper()
	By("creating a Session in each namespace with agenthost, and appending two turns to each")
	for i, ns := range c.namespaces {
		shard, hashedTo := specShards[i%len(specShards)], specShards[i%len(specShards)]
		if i == len(c.namespaces)-1 {
			shard, hashedTo = pinnedShard, specShards[0]
		}
		s := createHostedSession(ctx, c.store, c.kube, ns, nameInShard(ns, "chat", hashedTo, specShards))
		c.sessions = append(c.sessions, s)
		c.shardOf[s.key()] = shard
	}
	for range 2 {
		appendTurns(ctx, c.sessions)
	}
	expectAllCurrent(ctx, c.kube, c.sessions)
}

// expectPlacement: each Session is labelled with its shard, the policy's
// hash of its namespace and name, or its namespace's pin.
func (c *shardedCluster) expectPlacement() {
	GinkgoHelper()
	By("seeing each Session's shard in its label: the hash of namespace/name, or the namespace's pin")
	for _, s := range c.sessions {
		Expect(kubectl("get", "session", s.name, "-n", s.namespace, "-o", `jsonpath={.metadata.labels.turnlog\.dev/shard}`)).
			To(Equal(c.shardOf[s.key()]), "the shard of %s", s.key())
	}
	GinkgoWriter.Print(kubectlAllNamespaces("get", "sessions", "-l", turnlogv1.LabelShard, "-L", turnlogv1.LabelShard))
}

// sessionsIn is the spec's Sessions in shard, or, with in false, in the
// other shards.
func (c *shardedCluster) sessionsIn(shard string, in bool) []*hostedSession {
	var out []*hostedSession
	for _, s := range c.sessions {
		if (c.shardOf[s.key()] == shard) == in {
			out = append(out, s)
		}
	}
	return out
}

// perNamespace counts sessions by namespace.
func perNamespace(sessions []*hostedSession) map[string]float64 {
	out := map[string]float64{}
	for _, s := range sessions {
		out[s.namespace]++
	}
	return out
}

// expectEachShardAlone: each manager's metrics count exactly its shard's
// Sessions (turnlog_sessions comes from its cache) and its Session
// controller has reconciled; the standby has reconciled nothing; each
// namespace's worker Deployment is its Session's shard's.
func (c *shardedCluster) expectEachShardAlone(ctx context.Context) {
	GinkgoHelper()
	By("reading each manager's metrics: it holds only its shard's Sessions and reconciles them; the standby reconciles nothing")
	for shard, m := range c.active {
		want := perNamespace(c.sessionsIn(shard, true))
		Eventually(func(g Gomega) {
			samples, err := scrapeMetrics(ctx, m.metricsAddr)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(metricByLabel(samples, "turnlog_sessions", "namespace")).To(Equal(want), "turnlog_sessions{shard=%q} by namespace", shard)
			g.Expect(sumMetric(samples, "controller_runtime_reconcile_total", map[string]string{"controller": "session", "shard": shard})).
				To(BeNumerically(">", 0))
		}).Should(Succeed())
	}
	samples, err := scrapeMetrics(ctx, c.standby.metricsAddr)
	Expect(err).NotTo(HaveOccurred())
	Expect(sumMetric(samples, "controller_runtime_reconcile_total", nil)).To(BeZero(), "reconciles of the standby")
	Expect(metricByLabel(samples, "turnlog_sessions", "namespace")).To(BeEmpty(), "Sessions the standby reports")

	By("seeing in each namespace one worker Deployment, turnlog-worker-SHARD of its Session's shard")
	for _, s := range c.sessions {
		Expect(workerDeployments(s.namespace)).To(Equal(poolWorkerName+"-"+c.shardOf[s.key()]), s.namespace)
	}
}

// forkAcrossShards forks the first namespace's Session (shard e2e-0) with
// a SessionFork the policy puts in pinnedShard: the fork's manager reads
// the source from the API server, and the child, in the fork's shard,
// holds the source's prefix and becomes Current there.
func (c *shardedCluster) forkAcrossShards(ctx context.Context) {
	GinkgoHelper()
	source := c.sessions[0]
	ns := source.namespace
	fork := nameInShard(ns, "fork", pinnedShard, specShards)
	Expect(c.shardOf[source.key()]).NotTo(Equal(pinnedShard))
	By(fmt.Sprintf("forking %s (shard %s) at its first turn/end with kubectl apply of SessionFork %s, which the policy puts in shard %s",
		source.key(), c.shardOf[source.key()], fork, pinnedShard))
	kubectlWithInput([]byte(fmt.Sprintf("apiVersion: turnlog.dev/v1alpha1\nkind: SessionFork\nmetadata:\n  name: %s\nspec:\n  source:\n    name: %s\n  atSeq: \"7\"\n",
		fork, source.name)), "apply", "-n", ns, "-f", "-")
	Eventually(func() (string, error) {
		return tryKubectl("get", "sessionfork", fork, "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="Succeeded")].status}`)
	}).Should(Equal("True"))
	Expect(kubectl("get", "sessionfork", fork, "-n", ns, "-o", `jsonpath={.status.cutSeq} {.status.childName} {.metadata.labels.turnlog\.dev/shard}`)).
		To(Equal("7 " + fork + " " + pinnedShard))
	Expect(kubectl("get", "session", fork, "-n", ns, "-o", `jsonpath={.spec.forkedFrom.session} {.metadata.labels.turnlog\.dev/shard}`)).
		To(Equal(source.name + " " + pinnedShard))

	By("seeing the child Current in shard " + pinnedShard + ", its log the source's first 8 events")
	child := openHostedSession(ctx, c.store, c.kube, ns, fork)
	expectAllCurrent(ctx, c.kube, []*hostedSession{child})
	child.expectWholeTranscript(ctx)
	sourceLog := turnlog("export", "--session", source.name, "-n", ns)
	Expect(turnlog("export", "--session", fork, "-n", ns)).To(Equal(string(sampleLines([]byte(sourceLog), 8))))
	c.sessions = append(c.sessions, child)
	c.shardOf[child.key()] = pinnedShard

	By("reading the metrics: the fork was reconciled by shard " + pinnedShard + "'s manager alone")
	for shard, m := range c.active {
		samples, err := scrapeMetrics(ctx, m.metricsAddr)
		Expect(err).NotTo(HaveOccurred())
		reconciles := sumMetric(samples, "controller_runtime_reconcile_total", map[string]string{"controller": "sessionfork"})
		if shard == pinnedShard {
			Expect(reconciles).To(BeNumerically(">", 0))
			Expect(metricByLabel(samples, "turnlog_sessionforks", "namespace")).To(Equal(map[string]float64{ns: 1}))
		} else {
			Expect(reconciles).To(BeZero(), "fork reconciles of shard %s", shard)
		}
	}
}

// killActiveManager SIGKILLs the active manager of killedShard while hosts
// go on appending to every Session: the other shards' Sessions become
// Current at each turn, the killed shard's wait, its standby takes the
// Lease, and they become Current there with every turn.
func (c *shardedCluster) killActiveManager(ctx context.Context) {
	GinkgoHelper()
	waiting, others := c.sessionsIn(killedShard, true), c.sessionsIn(killedShard, false)
	holder, _, err := c.leaseHolder(ctx, killedShard)
	Expect(err).NotTo(HaveOccurred())
	headsBefore := map[string]int64{}
	for _, s := range waiting {
		headsBefore[s.key()] = s.head.Next - 1
	}
	heads := watchHeads(ctx, c.kube, turnlogv1.LabelShard+"="+killedShard)

	By("SIGKILL to the active manager of shard " + killedShard)
	killedAt := time.Now()
	Expect(c.active[killedShard].kill()).To(Succeed())
	for range 2 {
		By(fmt.Sprintf("appending turn %d to every Session, the killed shard's too: the other shards' become Current", c.sessions[0].turns+1))
		appended := time.Now()
		appendTurns(ctx, c.sessions)
		expectAllCurrent(ctx, c.kube, others)
		GinkgoWriter.Printf("turn %d: the other shards' %d Sessions Current %.2f s after the appends (%.1f s after the kill)\n",
			c.sessions[0].turns, len(others), time.Since(appended).Seconds(), time.Since(killedAt).Seconds())
	}

	By("seeing the standby take the Lease of shard " + killedShard)
	var acquired time.Time
	Eventually(func(g Gomega) {
		now, at, err := c.leaseHolder(ctx, killedShard)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(now).NotTo(BeElementOf(holder, ""))
		acquired = at
	}).Should(Succeed())
	Eventually(c.standby.leads).WithContext(ctx).Should(BeTrue())
	Eventually(c.standby.logSinceStart).Should(ContainSubstring("Successfully acquired lease"))

	By("seeing the killed shard's Sessions Current on the standby, with every turn")
	expectAllCurrent(ctx, c.kube, waiting)
	recovered := time.Now()
	for _, s := range c.sessions {
		s.expectWholeTranscript(ctx)
	}
	GinkgoWriter.Printf("shard %s: the standby took the Lease %.1f s after the SIGKILL; its %d Sessions Current with every turn %.1f s after it\n",
		killedShard, acquired.Sub(killedAt).Seconds(), len(waiting), recovered.Sub(killedAt).Seconds())

	By("seeing that they waited: no status of theirs went past its head before the kill until the standby held the Lease")
	for _, s := range waiting {
		// The watch may see the status a moment after the reads above.
		var moved time.Time
		Eventually(func(g Gomega) {
			var ok bool
			moved, ok = heads.firstAt(s.key(), headsBefore[s.key()]+1)
			g.Expect(ok).To(BeTrue(), "a status of %s past seq %d", s.key(), headsBefore[s.key()])
		}).Should(Succeed())
		Expect(moved).To(BeTemporally(">=", acquired), "%s moved on before the standby held the Lease", s.key())
	}
	c.expectStandbyOwnsShard(ctx, waiting)
}

// expectStandbyOwnsShard: the standby, now leading, reports the shard's
// Sessions, and the shard's worker Deployments dial it.
func (c *shardedCluster) expectStandbyOwnsShard(ctx context.Context, sessions []*hostedSession) {
	GinkgoHelper()
	By("seeing the standby report the shard's Sessions, and the shard's worker Deployments dial it")
	samples, err := scrapeMetrics(ctx, c.standby.metricsAddr)
	Expect(err).NotTo(HaveOccurred())
	Expect(metricByLabel(samples, "turnlog_sessions", "namespace")).To(Equal(perNamespace(sessions)))
	for _, s := range sessions {
		Eventually(func() (string, error) {
			return tryKubectl("get", "deployment", poolWorkerName+"-"+killedShard, "-n", s.namespace, "-o", "jsonpath={.spec.template.spec.containers[0].args}")
		}).Should(ContainSubstring(`"--endpoint=` + c.standby.endpoint() + `"`))
	}
}
