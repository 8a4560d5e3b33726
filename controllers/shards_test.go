package controllers

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/kubeapply"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/testutil/shardpolicy"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// Shards: a manager per shard on one API server, each reconciling the
// Sessions that the admission policy of config/shards gives its shard, as
// a platform runs `turnlog manager --shard=NAME` (docs/scaling.md). Shard
// 0 has two replicas electing a leader; 1 and 2 one each.
var _ = Describe("Shards", Ordered, func() {
	const perNamespace = 4
	var (
		namespaces []string
		stores     *BucketCache
		sio        *SessionIO
		journal    *storeJournal
		replicas   map[string]*shardReplica
		turns      [][]byte
		// written is how many turns every Session's log holds.
		written int
	)
	var policyFiles []string
	for _, file := range []string{"shard_policy.yaml", "shards.yaml", "shard_move_policy.yaml", "shard_operator_role.yaml"} {
		policyFiles = append(policyFiles, filepath.Join("..", "config", "shards", file))
	}

	start := func(shard, name string) {
		GinkgoHelper()
		replicas[name] = startShardReplica(shard, name, namespaces, journal, stores)
	}
	// sessionsOf lists the specs' Sessions by shard, as the API server has
	// them.
	sessionsOf := func() map[string][]turnlogv1.Session {
		GinkgoHelper()
		out := map[string][]turnlogv1.Session{}
		for _, ns := range namespaces {
			list := &turnlogv1.SessionList{}
			Expect(k8sClient.List(ctx, list, client.InNamespace(ns))).To(Succeed())
			for _, s := range list.Items {
				out[s.Labels[turnlogv1.LabelShard]] = append(out[s.Labels[turnlogv1.LabelShard]], s)
			}
		}
		return out
	}
	// current waits until the Session is Ready=True/Current with a log of
	// the given number of events.
	current := func(ns, name string, events int64) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			s := getSession(ns, name)(g)
			g.Expect(s.Status.HeadSeq).NotTo(BeNil())
			g.Expect(*s.Status.HeadSeq).To(Equal(events - 1))
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/Current"))
		}).WithTimeout(time.Minute).Should(Succeed(), "Session %s/%s", ns, name)
	}
	logOf := func(n int) []byte { return bytes.Join(turns[:n], nil) }
	appendTurn := func(s turnlogv1.Session) {
		GinkgoHelper()
		_, _, err := sio.Append(ctx, s.Namespace, s.Name, bytes.NewReader(turns[written]))
		Expect(err).NotTo(HaveOccurred())
	}

	BeforeAll(func() {
		turns = turnsOf(loggen.Log(600, 7))
		Expect(len(turns)).To(BeNumerically(">=", 7))
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNamespace}}))).To(Succeed())
		Expect(kubeapply.Apply(ctx, cfg, policyFiles...)).To(Succeed())
		for range 6 {
			namespaces = append(namespaces, newNamespace("shards"))
		}
		By("waiting for the API server to apply the policy")
		Eventually(func(g Gomega) {
			probe := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: namespaces[0], GenerateName: "probe-"}}
			g.Expect(k8sClient.Create(ctx, probe)).To(Succeed())
			Expect(k8sClient.Delete(ctx, probe)).To(Succeed())
			g.Expect(probe.Labels).To(HaveKey(turnlogv1.LabelShard))
		}).Should(Succeed())

		stores = storesAt("file://" + GinkgoT().TempDir())
		sio = &SessionIO{Client: k8sClient, Stores: stores}
		journal = &storeJournal{}
		replicas = map[string]*shardReplica{}
		start("0", "0-first")
		Eventually(replicas["0-first"].leads).Should(BeTrue())
		start("0", "0-second")
		start("1", "1")
		start("2", "2")
	})
	AfterAll(func() {
		journal.unhold()
		for _, r := range replicas {
			r.stop()
		}
		By("removing the policies, so that the Sessions of other specs get no shard")
		admission := func(kind, name string) client.Object {
			return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: kind}, ObjectMeta: metav1.ObjectMeta{Name: name}}
		}
		for _, obj := range []client.Object{
			admission("MutatingAdmissionPolicyBinding", "turnlog-shard"),
			admission("MutatingAdmissionPolicy", "turnlog-shard"),
			admission("ValidatingAdmissionPolicyBinding", "turnlog-shard-move"),
			admission("ValidatingAdmissionPolicy", "turnlog-shard-move"),
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "turnlog-shard-operator"}},
		} {
			Expect(k8sClient.Delete(ctx, obj)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			probe := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: namespaces[0], GenerateName: "probe-"}}
			g.Expect(k8sClient.Create(ctx, probe)).To(Succeed())
			Expect(k8sClient.Delete(ctx, probe)).To(Succeed())
			g.Expect(probe.Labels).NotTo(HaveKey(turnlogv1.LabelShard))
		}).Should(Succeed())
		Expect(stores.Close()).To(Succeed())
	})

	It("gives each new Session a shard, and each shard's manager reconciles its own Sessions alone", func() {
		written = 2
		for _, ns := range namespaces {
			for i := range perNamespace {
				_, _, err := sio.Import(ctx, ns, fmt.Sprintf("chat-%d", i), bytes.NewReader(logOf(written)))
				Expect(err).NotTo(HaveOccurred())
			}
		}
		byShard := sessionsOf()
		Expect(byShard).To(HaveLen(3), "the policy spreads 24 Sessions over the 3 shards of turnlog-shards")
		for shard, sessions := range byShard {
			for _, s := range sessions {
				Expect(shard).To(Equal(shardpolicy.Shard(s.Namespace+"/"+s.Name, []string{"0", "1", "2"})), "the shard of %s/%s", s.Namespace, s.Name)
				current(s.Namespace, s.Name, eventsIn(logOf(written)))
			}
		}

		By("each replica caching its shard's Sessions alone")
		for _, r := range replicas {
			list := &turnlogv1.SessionList{}
			Expect(r.mgr.GetCache().List(ctx, list)).To(Succeed())
			Expect(names(list.Items)).To(ConsistOf(names(byShard[r.shard])), "replica %s", r.name)
		}
		By("each shard reading and writing only its own Sessions' logs")
		roots := journal.roots()
		for shard, sessions := range byShard {
			own := map[string]bool{}
			for _, s := range sessions {
				own[rootOf(s)] = true
			}
			Expect(roots[shard]).To(Equal(own), "shard %s", shard)
		}
	})

	It("forks a Session of another shard", func() {
		source := sessionsOf()["0"][0]
		cut := eventsIn(turns[0]) - 1
		fork := newFork(source.Namespace, "across-shards", source.Name, fmt.Sprint(cut))
		// Created in shard 1 whatever its name hashes to; its child is
		// placed by the policy.
		fork.Labels = map[string]string{turnlogv1.LabelShard: "1"}
		Expect(k8sClient.Create(ctx, fork)).To(Succeed())
		Eventually(func(g Gomega) string {
			return cond(getFork(source.Namespace, "across-shards")(g).Status.Conditions, turnlogv1.ConditionSucceeded)
		}).Should(Equal("True/Forked"))
		child := waitReady(source.Namespace, "across-shards")
		Expect(child.Labels[turnlogv1.LabelShard]).To(BeElementOf("0", "1", "2"))
		Expect(exportLog(sio, source.Namespace, "across-shards")).To(Equal(string(turns[0])))
		Expect(journal.find(0, func(e journalEntry) bool {
			return e.shard == "1" && e.op != "attributes" && strings.HasPrefix(e.key, rootOf(source)+"/")
		})).NotTo(Equal(-1), "shard 1's manager read the log of shard 0's Session")
	})

	It("goes on appending in the other shards while one shard's manager is down, and catches up when it is back", func() {
		replicas["2"].stop()
		delete(replicas, "2")
		byShard := sessionsOf()
		for _, sessions := range byShard {
			for _, s := range sessions {
				if s.Spec.ForkedFrom == nil {
					appendTurn(s)
				}
			}
		}
		written++
		for _, shard := range []string{"0", "1"} {
			for _, s := range byShard[shard] {
				if s.Spec.ForkedFrom == nil {
					current(s.Namespace, s.Name, eventsIn(logOf(written)))
				}
			}
		}
		By("shard 2's Sessions waiting for their manager")
		for _, s := range byShard["2"] {
			if s.Spec.ForkedFrom == nil {
				Expect(*getSession(s.Namespace, s.Name)(Default).Status.HeadSeq).To(Equal(eventsIn(logOf(written-1))-1), "Session %s/%s", s.Namespace, s.Name)
			}
		}
		start("2", "2")
		for _, s := range byShard["2"] {
			if s.Spec.ForkedFrom == nil {
				current(s.Namespace, s.Name, eventsIn(logOf(written)))
			}
		}
	})

	It("lets a standby replica take its shard's Lease over when the leader stops", func() {
		lease := &coordinationv1.Lease{}
		key := client.ObjectKey{Namespace: leaseNamespace, Name: LeaderElectionID("0")}
		Expect(k8sClient.Get(ctx, key, lease)).To(Succeed())
		leader := *lease.Spec.HolderIdentity
		Expect(replicas["0-second"].leads()).To(BeFalse())

		replicas["0-first"].stop()
		delete(replicas, "0-first")
		Eventually(replicas["0-second"].leads).WithTimeout(time.Minute).Should(BeTrue())
		Expect(k8sClient.Get(ctx, key, lease)).To(Succeed())
		Expect(*lease.Spec.HolderIdentity).NotTo(Equal(leader))

		for _, s := range sessionsOf()["0"] {
			if s.Spec.ForkedFrom == nil {
				appendTurn(s)
			}
		}
		written++
		for _, s := range sessionsOf()["0"] {
			if s.Spec.ForkedFrom == nil {
				current(s.Namespace, s.Name, eventsIn(logOf(written)))
			}
		}
	})

	It("moves a relabelled Session to its new shard with nothing lost, its run in the old shard stopped before the new shard's starts", func() {
		var moving turnlogv1.Session
		for _, s := range sessionsOf()["0"] {
			if s.Spec.ForkedFrom == nil {
				moving = s
				break
			}
		}
		root := rootOf(moving)
		By("holding shard 0's run of the Session at its first write")
		journal.hold("0", root+"/")
		appendTurn(moving)
		written++
		Eventually(func() int {
			return journal.find(0, func(e journalEntry) bool { return e.shard == "0" && e.op == "held" })
		}).ShouldNot(Equal(-1))

		By("relabelling it into shard 1 while the run is held")
		patch := client.MergeFrom(moving.DeepCopy())
		moving.Labels[turnlogv1.LabelShard] = "1"
		Expect(k8sClient.Patch(ctx, &moving, patch)).To(Succeed())
		Eventually(func(g Gomega) string {
			ready := meta.FindStatusCondition(getSession(moving.Namespace, moving.Name)(g).Status.Conditions, turnlogv1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			return ready.Message
		}).Should(ContainSubstring("has just come into shard 1"))
		current(moving.Namespace, moving.Name, eventsIn(logOf(written)))

		By("shard 0 having given its run up before shard 1 wrote anything of the Session")
		gaveUp := journal.find(0, func(e journalEntry) bool { return e.shard == "0" && e.op == "held-cancelled" })
		Expect(gaveUp).NotTo(Equal(-1), "shard 0's held write was cancelled, not let through")
		under := func(e journalEntry) bool { return strings.HasPrefix(e.key, root+"/") }
		firstWrite := journal.find(0, func(e journalEntry) bool { return e.shard == "1" && e.op == "put" && under(e) })
		Expect(firstWrite).To(BeNumerically(">", gaveUp))
		Expect(journal.last(func(e journalEntry) bool { return e.shard == "0" && under(e) })).To(BeNumerically("<", firstWrite))
		for _, r := range replicas {
			list := &turnlogv1.SessionList{}
			Expect(r.mgr.GetCache().List(ctx, list, client.InNamespace(moving.Namespace))).To(Succeed())
			if r.shard == "1" {
				Expect(names(list.Items)).To(ContainElement(moving.Namespace + "/" + moving.Name))
			} else {
				Expect(names(list.Items)).NotTo(ContainElement(moving.Namespace+"/"+moving.Name), "replica %s", r.name)
			}
		}

		By("appending on in its new shard")
		journal.unhold()
		appendTurn(moving)
		written++
		current(moving.Namespace, moving.Name, eventsIn(logOf(written)))
		Expect(exportLog(sio, moving.Namespace, moving.Name)).To(Equal(string(logOf(written))))
		transcript, _, err := sio.Transcript(ctx, moving.Namespace, moving.Name, func(a turnlog.Adapter) turnlog.Adapter { return a })
		Expect(err).NotTo(HaveOccurred())
		Expect(transcript.ThroughSeq).To(Equal(eventsIn(logOf(written))-1), "the stored transcript reaches the last turn")

		By("its manifest, written by shard 1 once the handover was over, naming shard 1 for an adoption")
		Eventually(func(g Gomega) string {
			_, lg, err := sio.session(ctx, moving.Namespace, moving.Name)
			g.Expect(err).NotTo(HaveOccurred())
			data, err := lg.Manifest(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			stored, _, err := sessionio.ReadManifest(data, lg.Location())
			g.Expect(err).NotTo(HaveOccurred())
			return stored.Labels[turnlogv1.LabelShard]
		}).Should(Equal("1"))
	})

	It("lets only a requester allowed to update sessions/shard move a Session: a tenant is refused in one line, an admin and an operator are not", func() {
		var moving turnlogv1.Session
		for _, s := range sessionsOf()["2"] {
			if s.Spec.ForkedFrom == nil {
				moving = s
				break
			}
		}
		Expect(moving.Name).NotTo(BeEmpty(), "shard 2 holds a Session of the specs before")
		ns, name := moving.Namespace, moving.Name
		Expect(moving.Labels[turnlogv1.LabelShard]).To(Equal(shardpolicy.Shard(ns+"/"+name, []string{"0", "1", "2"})), "placed by the policy's hash")
		tenantClient := shardTenant(ns, "shard-tenant")
		operatorClient := shardOperator(ns, "shard-operator")
		session := func() client.Object {
			return &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		}
		shardOf := func() string { return getSession(ns, name)(Default).Labels[turnlogv1.LabelShard] }

		By("waiting for the API server to enforce turnlog-shard-move on the tenant, and RBAC to grant the operator")
		Eventually(func() error {
			return relabelShard(tenantClient, session(), "0", client.DryRunAll)
		}).Should(MatchError(ContainSubstring(shardRefusal("Session", ns, name, "2", "0"))))
		Eventually(func() error {
			return relabelShard(operatorClient, session(), "0", client.DryRunAll)
		}).Should(Succeed())

		By("refusing the tenant's move, in one line naming the Session, both shards and what it needs")
		err := relabelShard(tenantClient, session(), "0")
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring(shardRefusal("Session", ns, name, "2", "0")))
		Expect(err.Error()).NotTo(ContainSubstring("\n"))
		Expect(shardOf()).To(Equal("2"))

		By("letting the tenant change the Session's other labels and its annotations")
		tenants := getSession(ns, name)(Default)
		patch := client.MergeFrom(tenants.DeepCopy())
		tenants.Labels["team"] = "billing"
		if tenants.Annotations == nil {
			tenants.Annotations = map[string]string{}
		}
		tenants.Annotations["example.com/owner"] = "ana"
		Expect(tenantClient.Patch(ctx, tenants, patch)).To(Succeed())
		tenants = getSession(ns, name)(Default)
		Expect(tenants.Labels).To(HaveKeyWithValue("team", "billing"))
		Expect(tenants.Annotations).To(HaveKeyWithValue("example.com/owner", "ana"))
		Expect(shardOf()).To(Equal("2"))

		By("letting the suite's admin (system:masters) move it to shard 0")
		Expect(relabelShard(k8sClient, session(), "0")).To(Succeed())
		Expect(shardOf()).To(Equal("0"))

		By("refusing the tenant's removal of the label, which turnlog-shard puts back as its hash, shard 2")
		err = relabelShard(tenantClient, session(), "")
		Expect(err).To(MatchError(ContainSubstring(shardRefusal("Session", ns, name, "0", "2"))))
		Expect(shardOf()).To(Equal("0"))

		By("letting a user bound to turnlog-shard-operator move it to shard 1")
		Expect(relabelShard(operatorClient, session(), "1")).To(Succeed())
		Expect(shardOf()).To(Equal("1"))

		By("refusing the tenant's move of a SessionFork too")
		fork := newFork(ns, "moved-fork", name, "0")
		fork.Labels = map[string]string{turnlogv1.LabelShard: "1"}
		Expect(k8sClient.Create(ctx, fork)).To(Succeed())
		Expect(relabelShard(tenantClient, fork, "2")).To(MatchError(ContainSubstring(shardRefusal("SessionFork", ns, fork.Name, "1", "2"))))
		Expect(relabelShard(operatorClient, fork, "2")).To(Succeed())
	})
})

// shardRefusal is what the API server says to a move of the object of
// kind ns/name from shard from to shard to.
func shardRefusal(kind, ns, name, from, to string) string {
	return fmt.Sprintf(`%s %s/%s may not move from shard %s to shard %s: changing its label turnlog.dev/shard needs update on %ss/shard `+
		`(the ClusterRole turnlog-shard-operator grants it; docs/scaling.md, "Moving Sessions between shards")`,
		kind, ns, name, from, to, strings.ToLower(kind))
}

// relabelShard patches the object's labels as c: its shard set to shard
// or, when shard is "", removed.
func relabelShard(c client.Client, obj client.Object, shard string, opts ...client.PatchOption) error {
	GinkgoHelper()
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	labels := obj.GetLabels()
	if shard == "" {
		delete(labels, turnlogv1.LabelShard)
	} else {
		labels[turnlogv1.LabelShard] = shard
	}
	obj.SetLabels(labels)
	return c.Patch(ctx, obj, patch, opts...)
}

// shardTenant gives user every verb on Sessions and SessionForks in ns, as
// a tenant may well be given, and returns a client that acts as that user:
// "*" on sessions grants nothing on sessions/shard.
func shardTenant(ns, user string) client.Client {
	GinkgoHelper()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "shard-tenant", Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"turnlog.dev"}, Resources: []string{"sessions", "sessionforks"}, Verbs: []string{"*"}},
		},
	}
	Expect(k8sClient.Create(ctx, role)).To(Succeed())
	bind(ns, user, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name})
	return impersonating(user)
}

// shardOperator binds user to config/shards' ClusterRole
// turnlog-shard-operator in ns, and returns a client that acts as that
// user.
func shardOperator(ns, user string) client.Client {
	GinkgoHelper()
	bind(ns, user, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "turnlog-shard-operator"})
	return impersonating(user)
}

// bind binds user to role in ns.
func bind(ns, user string, role rbacv1.RoleRef) {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:    role,
	})).To(Succeed())
}

// names are the objects' names.
func names(sessions []turnlogv1.Session) []string {
	out := make([]string, len(sessions))
	for i, s := range sessions {
		out[i] = s.Namespace + "/" + s.Name
	}
	return out
}

// rootOf is where the Session's log lives in the specs' store.
func rootOf(s turnlogv1.Session) string {
	return s.Namespace + "/" + s.Name + "/" + string(s.UID)
}

// TestShardMetrics: a manager of one shard serves every metric with the
// label shard, so that a dashboard or an alert can tell the shards apart.
func TestShardMetrics(t *testing.T) {
	registry := prometheus.NewRegistry()
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runs_total", Help: "runs"}, []string{"task"})
	registry.MustRegister(runs)
	runs.WithLabelValues("replay").Inc()
	gathered, err := shardRegistry{RegistererGatherer: registry, shard: "b"}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(gathered) != 1 || len(gathered[0].Metric) != 1 {
		t.Fatalf("gathered %v", gathered)
	}
	var labels []string
	for _, l := range gathered[0].Metric[0].Label {
		labels = append(labels, l.GetName()+"="+l.GetValue())
	}
	if got := strings.Join(labels, ","); got != "shard=b,task=replay" {
		t.Errorf("labels %s, want shard=b,task=replay (sorted by name)", got)
	}
}

// TestShardPolicyBalance: the admission policy's hash spreads Sessions
// evenly over the shards, for names a platform makes one after the other
// and for random ones (docs/scaling.md quotes the spread it logs):
//
//	go test ./controllers/ -run TestShardPolicyBalance -v
func TestShardPolicyBalance(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	keys := map[string][]string{}
	for i := range 30000 {
		keys["sequential"] = append(keys["sequential"], fmt.Sprintf("team-%d/chat-%d", i%6, i))
		name := make([]byte, 8)
		for j := range name {
			name[j] = alphabet[rnd.IntN(len(alphabet))]
		}
		keys["random"] = append(keys["random"], fmt.Sprintf("tenant-%d/session-%s", rnd.IntN(500), name))
	}
	for _, kind := range []string{"sequential", "random"} {
		for _, n := range []int{2, 3, 4, 8, 16} {
			var shards []string
			for i := range n {
				shards = append(shards, fmt.Sprint(i))
			}
			count := map[string]int{}
			for _, key := range keys[kind] {
				count[shardpolicy.Shard(key, shards)]++
			}
			even := float64(len(keys[kind])) / float64(n)
			least, most := math.Inf(1), 0.0
			for _, shard := range shards {
				least, most = min(least, float64(count[shard])/even), max(most, float64(count[shard])/even)
			}
			t.Logf("%d %s names over %2d shards: each shard %.0f%% to %.0f%% of an even share", len(keys[kind]), kind, n, 100*least, 100*most)
			if least < 0.75 || most > 1.25 {
				t.Errorf("%s names over %d shards: a shard gets %.0f%% to %.0f%% of an even share", kind, n, 100*least, 100*most)
			}
		}
	}
}
