package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/workerpool"
	"github.com/turnlog/turnlog/test/internal/hostturn"
)

// The objects pod worker mode keeps in a busy namespace
// (controllers/pool_specs.go): the Deployment of its worker pods, and the
// Secret with their token and the manager's certificate, both named
// poolWorkerName, and the label on them and on the pods.
const (
	poolWorkerName  = "turnlog-worker"
	poolLabelKey    = "turnlog.dev/worker-pool"
	poolWorkerLabel = poolLabelKey + "=true"
)

// Worker pods that stay while their namespace is busy (--worker-mode=pod):
// a host streams turns into one Session through the public agenthost
// package, its namespace's one worker pod does every assembly and replay
// without a Job or a new pod per turn, a pod deleted mid-stream is replaced
// and loses nothing, a namespace's token reaches no other namespace, and the
// pods go once the namespace is idle.
var _ = Describe("worker pods (container node)", func() {
	It("serve a 20-turn stream from one pod, survive its deletion, hold one namespace's token, and go when idle", func(ctx SpecContext) {
		m := needContainerNode()
		const (
			turns = 20
			// The worker pod is deleted while turn deleteAt is in flight.
			deleteAt    = 11
			idleTimeout = 20 * time.Second
			// Idle timeout, a tick of the pool's loop, and the pods'
			// graceful stop.
			idleWithin = 60 * time.Second
		)
		endpoint := m.endpoint()

		By("restarting the suite's manager with an idle timeout of " + idleTimeout.String() + ", serving worker pods on " + m.workerAddr)
		Expect(m.restartWith(workerImage, "--worker-idle-timeout="+idleTimeout.String())).To(Succeed())
		DeferCleanup(func() { Expect(m.restartWith(workerImage)).To(Succeed()) })

		suffix := make([]byte, 3)
		_, _ = rand.Read(suffix)
		ns := "turnlog-e2e-pool-" + hex.EncodeToString(suffix)
		By("creating namespace " + ns + " with the store credentials Secret")
		createStoreCredentials(ctx, ns)
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				out, _ := tryKubectl("get", "sessions,deployments,replicasets,pods,secrets,jobs,events", "-n", ns, "-o", "wide")
				GinkgoWriter.Printf("\n--- kubectl get sessions,deployments,replicasets,pods,secrets,jobs,events -n %s\n%s", ns, out)
				logs, _ := tryKubectl("logs", "-n", ns, "-l", poolWorkerLabel, "--prefix", "--tail=100")
				GinkgoWriter.Printf("\n--- worker pod logs\n%s\n", logs)
			}
			_, _ = tryKubectl("delete", "namespace", ns, "--wait=false")
		})

		// The namespace holds nothing yet: every Job and Pod the watch
		// sees is the manager's.
		created := watchPoolCreated(ns)

		kube := kubeClient()
		st := openHostStore(ctx)
		const session = "pool-chat"
		log, err := st.CreateSession(ctx, kube, ns, session, hostturn.Model)
		Expect(err).NotTo(HaveOccurred())
		a := log.Appender(agenthost.AppenderOptions{})

		By(fmt.Sprintf("streaming %d turns, each waited for through its turn/end; the worker pod is deleted during turn %d", turns, deleteAt))
		seconds := make([]float64, 0, turns)
		var (
			victim    string
			victimLog func() string
		)
		for i := range turns {
			turn := int64(i + 1)
			created.setTurn(i)
			if turn == deleteAt {
				victim = expectRestrictedWorkerPod(ns, endpoint)
				expectTokenHoldsOnlyItsNamespace(ctx, ns, endpoint)
				// Its log is gone with it: follow it until its container
				// stops, to see what it did as it was stopped.
				victimLog = followPodLog(ctx, ns, victim)
			}
			streamed, finish := hostturn.Events(turn)
			Expect(a.Add(ctx, streamed...)).To(Succeed())
			began := time.Now()
			Expect(a.Add(ctx, finish...)).To(Succeed())
			if turn == deleteAt {
				// The turn is written and its Session nudged: its runs are
				// on the board, or on the pod, as the pod goes.
				created.markDeletion()
				out := kubectl("delete", "pod", "-n", ns, "-l", poolWorkerLabel, "--wait=false")
				GinkgoWriter.Printf("turn %d: kubectl delete pod -l %s %.2fs after the append: %s", turn, poolWorkerLabel, time.Since(began).Seconds(), out)
			}
			head, err := log.Head(ctx)
			Expect(err).NotTo(HaveOccurred())
			waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			tr, err := log.WaitTranscript(waitCtx, head.LastTurnEnd)
			cancel()
			Expect(err).NotTo(HaveOccurred(), "turn %d: no transcript through seq %d", turn, head.LastTurnEnd)
			took := time.Since(began).Seconds()
			Expect(tr.ThroughSeq).To(BeNumerically(">=", head.LastTurnEnd))
			// A question and an answer per turn: anything else would mean
			// the wait returned another transcript than this turn's.
			Expect(tr.Messages).To(HaveLen(2*int(turn)), "turn %d", turn)
			seconds = append(seconds, took)
			GinkgoWriter.Printf("turn %d: transcript through seq %d after %.2fs\n", turn, tr.ThroughSeq, took)
		}
		Expect(a.Close(ctx)).To(Succeed())
		streamEnd := time.Now()
		head, err := log.Head(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(head.Turns).To(BeEquivalentTo(turns))

		By("seeing the Session Ready and Current, replayed through the log's last turn/end")
		Eventually(func(g Gomega) {
			s := &turnlogv1.Session{}
			g.Expect(kube.Get(ctx, types.NamespacedName{Namespace: ns, Name: session}, s)).To(Succeed())
			c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(turnlogv1.ReasonCurrent))
			g.Expect(s.Status.Replay).NotTo(BeNil())
			g.Expect(s.Status.Replay.ThroughSeq).To(Equal(head.LastTurnEnd))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			out, err := tryKubectl("get", "session", session, "-n", ns)
			g.Expect(err).NotTo(HaveOccurred())
			lines := strings.Split(strings.TrimSpace(out), "\n")
			g.Expect(lines).To(HaveLen(2), out)
			header := columnGap.Split(strings.TrimSpace(lines[0]), -1)
			values := columnGap.Split(strings.TrimSpace(lines[1]), -1)
			g.Expect(values).To(HaveLen(len(header)), out)
			row := map[string]string{}
			for i, h := range header {
				row[h] = values[i]
			}
			g.Expect(row).To(HaveKeyWithValue("HEAD", strconv.FormatInt(head.Next-1, 10)), out)
			g.Expect(row).To(HaveKeyWithValue("TURNS", strconv.Itoa(turns)), out)
			g.Expect(row).To(HaveKeyWithValue("LAST END", "stop"), out)
			g.Expect(row).To(HaveKeyWithValue("READY", "True"), out)
			GinkgoWriter.Printf("kubectl get session %s -n %s:\n%s", session, ns, out)
		}).Should(Succeed())

		By("losing nothing: the transcript holds every turn's question and answer")
		tr, err := log.Transcript(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(tr.Messages).To(HaveLen(2 * turns))
		Expect(tr.ThroughSeq).To(Equal(head.LastTurnEnd))

		By("counting what the stream created: no Job at all, one pod on the first turn, none after it but the deleted pod's replacement")
		pods := created.podsSnapshot()
		for _, p := range pods {
			GinkgoWriter.Printf("pod %s created during turn %d (%s)\n", p.name, p.turn+1, p.stage)
		}
		Expect(created.jobCount()).To(BeZero())
		Expect(created.podsIn(stageFirstTurn)).To(HaveLen(1), "pods created during turn 1")
		Expect(created.podsIn(stageBeforeDeletion)).To(BeEmpty(), func() string {
			// Why the Deployment made another pod is in its ReplicaSets
			// and the namespace's Events: say it where the failure is read.
			out, _ := tryKubectl("get", "replicasets,events", "-n", ns, "-o", "wide")
			return "pods created from turn 2 until the deletion; kubectl get replicasets,events:\n" + out
		})
		replacements := created.podsIn(stageAfterDeletion)
		Expect(replacements).To(HaveLen(1), "pods created after the deletion")
		Expect(replacements[0]).NotTo(Equal(victim))
		GinkgoWriter.Printf("kubectl logs -f %s (the deleted pod), until it stopped:\n%s\n", victim, victimLog())
		replacementLog, _ := tryKubectl("logs", "-n", ns, replacements[0], "--tail=60")
		GinkgoWriter.Printf("kubectl logs %s (the replacement):\n%s\n", replacements[0], replacementLog)
		if lm, ok := env.manager.(*localManager); ok {
			printManagerPoolLines(lm)
		}
		printTurnFigures(seconds, created, turns, deleteAt)

		By(fmt.Sprintf("seeing the worker Deployment, its Secret and its pods gone within %s of the stream's end (idle timeout %s)", idleWithin, idleTimeout))
		created.setStage(stageIdle)
		Eventually(func(g Gomega) {
			out, err := tryKubectl("get", "deployments,secrets", "-n", ns, "-l", poolWorkerLabel, "-o", "name")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(strings.TrimSpace(out)).To(BeEmpty())
			out, err = tryKubectl("get", "pods", "-n", ns, "--no-headers")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(strings.TrimSpace(out)).To(BeEmpty())
		}).WithTimeout(time.Until(streamEnd.Add(idleWithin))).WithPolling(time.Second).Should(Succeed())
		GinkgoWriter.Printf("worker Deployment and pods gone %.1fs after the stream's end\n", time.Since(streamEnd).Seconds())
		Expect(created.podsIn(stageIdle)).To(BeEmpty(), "pods created while idle")
		Expect(created.jobCount()).To(BeZero())
	})
})

// followPodLog runs `kubectl logs -f` on pod; the function it returns waits
// up to 30s for the pod's container to stop and returns what was logged.
func followPodLog(ctx context.Context, namespace, pod string) func() string {
	GinkgoHelper()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, env.kubectl, "--kubeconfig", env.kubeconfig, "logs", "-f", "-n", namespace, pod)
	cmd.Stdout, cmd.Stderr = &out, &out
	Expect(cmd.Start()).To(Succeed())
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return func() string {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			return out.String() + "(still following after 30s: stopped)\n"
		}
		return out.String()
	}
}

// expectRestrictedWorkerPod checks namespace's one worker pod as kubectl
// shows it: Running, no service-account token, its namespace's token from
// the Secret turnlog-worker, the store's keys from the credentials Secret,
// dialing endpoint. It returns the pod's name.
func expectRestrictedWorkerPod(namespace, endpoint string) string {
	GinkgoHelper()
	By("checking the worker pod: no service-account token, its namespace's token from Secret " + poolWorkerName)
	var name string
	Eventually(func(g Gomega) {
		out, err := tryKubectl("get", "pods", "-n", namespace, "-l", poolWorkerLabel,
			"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.phase}{"\n"}{end}`)
		g.Expect(err).NotTo(HaveOccurred())
		fields := strings.Fields(out)
		g.Expect(fields).To(HaveExactElements(Not(BeEmpty()), Equal("Running")), out)
		name = fields[0]
	}).Should(Succeed())
	field := func(expr string) string {
		GinkgoHelper()
		out, err := tryKubectl("get", "pod", name, "-n", namespace, "-o", "jsonpath="+expr)
		Expect(err).NotTo(HaveOccurred())
		return out
	}
	Expect(field("{.spec.automountServiceAccountToken}")).To(Equal("false"))
	// No projected token volume, nor any mount of one.
	Expect(field("{.spec.volumes}")).To(BeEmpty())
	Expect(field("{.spec.containers[0].volumeMounts}")).To(BeEmpty())
	Expect(field(`{.spec.containers[0].env[?(@.name=="TURNLOG_WORKER_TOKEN")].valueFrom.secretKeyRef.name}`)).To(Equal(poolWorkerName))
	Expect(field(`{.spec.containers[0].env[?(@.name=="TURNLOG_WORKER_TOKEN")].valueFrom.secretKeyRef.key}`)).To(Equal("token"))
	Expect(field(`{.spec.containers[0].envFrom[*].secretRef.name}`)).To(Equal(workerCredentialsSecret))
	Expect(strings.Fields(field(`{.spec.containers[0].args[*]}`))).To(ContainElements(
		"serve", "--endpoint="+endpoint, "--namespace="+namespace))
	Expect(field(`{.spec.containers[0].securityContext.readOnlyRootFilesystem} {.spec.containers[0].securityContext.allowPrivilegeEscalation} {.spec.securityContext.runAsNonRoot}`)).
		To(Equal("true false true"))
	return name
}

// expectTokenHoldsOnlyItsNamespace calls the manager's worker endpoint from
// the suite's process with namespace's token from its Secret turnlog-worker:
// the token is accepted for namespace and refused for any other.
func expectTokenHoldsOnlyItsNamespace(ctx context.Context, namespace, endpoint string) {
	GinkgoHelper()
	By("using namespace " + namespace + "'s worker token for other namespaces: refused")
	secret, err := env.clientset.CoreV1().Secrets(namespace).Get(ctx, poolWorkerName, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	token, ca := string(secret.Data["token"]), secret.Data["ca.crt"]
	Expect(token).NotTo(BeEmpty())

	// Accepted in its own namespace: a heartbeat for a lease that does not
	// exist is answered "gone", past the token check, without taking any
	// run off the board.
	own, err := workerpool.NewClient(endpoint, namespace, "e2e-probe", token, ca)
	Expect(err).NotTo(HaveOccurred())
	Expect(own.Heartbeat(ctx, "no-such-lease")).To(MatchError(workerpool.ErrGone))

	for _, other := range []string{"other-namespace", env.namespace} {
		c, err := workerpool.NewClient(endpoint, other, "e2e-probe", token, ca)
		Expect(err).NotTo(HaveOccurred())
		_, ok, err := c.Lease(ctx, time.Second)
		Expect(err).To(MatchError(workerpool.ErrUnauthorized), "lease in %s with %s's token", other, namespace)
		Expect(ok).To(BeFalse())
		Expect(c.Heartbeat(ctx, "no-such-lease")).To(MatchError(workerpool.ErrUnauthorized))
	}
}

// Stages of the pool spec's stream, for what it created.
const (
	stageFirstTurn      = "turn 1"
	stageBeforeDeletion = "from turn 2 to the deletion"
	stageAfterDeletion  = "after the deletion"
	stageIdle           = "idle"
)

// poolCreated is each Job and Pod created in a namespace, by UID, with the
// turn and stage the stream was in when the watch saw it. Informers see
// every one, even a pod deleted a moment later.
type poolCreated struct {
	mu    sync.Mutex
	turn  int
	stage string
	jobs  map[types.UID]string
	pods  map[types.UID]createdPod
}

type createdPod struct {
	name  string
	turn  int
	stage string
}

// watchPoolCreated starts informers on ns's Jobs and Pods until the spec
// ends; ns must hold neither yet.
func watchPoolCreated(ns string) *poolCreated {
	GinkgoHelper()
	c := &poolCreated{stage: stageFirstTurn, jobs: map[types.UID]string{}, pods: map[types.UID]createdPod{}}
	factory := informers.NewSharedInformerFactoryWithOptions(env.clientset, 0, informers.WithNamespace(ns))
	jobs := factory.Batch().V1().Jobs().Informer()
	pods := factory.Core().V1().Pods().Informer()
	_, err := jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		o, err := meta.Accessor(obj)
		if err != nil {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.jobs[o.GetUID()]; !ok {
			c.jobs[o.GetUID()] = o.GetName()
		}
	}})
	Expect(err).NotTo(HaveOccurred())
	_, err = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.pods[pod.UID]; !ok {
			c.pods[pod.UID] = createdPod{name: pod.Name, turn: c.turn, stage: c.stage}
		}
	}})
	Expect(err).NotTo(HaveOccurred())
	stop := make(chan struct{})
	DeferCleanup(func() { close(stop) })
	factory.Start(stop)
	for typ, ok := range factory.WaitForCacheSync(stop) {
		Expect(ok).To(BeTrue(), "watching %v in %s", typ, ns)
	}
	Expect(len(jobs.GetStore().List())+len(pods.GetStore().List())).To(BeZero(), "namespace %s already has Jobs or Pods", ns)
	return c
}

// setTurn attributes what is created from now on to turn i (from 0); after
// turn 1 it is before the deletion until markDeletion.
func (c *poolCreated) setTurn(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.turn = i
	if i > 0 && c.stage == stageFirstTurn {
		c.stage = stageBeforeDeletion
	}
}

// markDeletion: what is created from now on comes after the worker pod's
// deletion.
func (c *poolCreated) markDeletion() { c.setStage(stageAfterDeletion) }

func (c *poolCreated) setStage(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stage = s
}

func (c *poolCreated) jobCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.jobs)
}

// podsIn is the names of the pods created during stage.
func (c *poolCreated) podsIn(stage string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.pods {
		if p.stage == stage {
			out = append(out, p.name)
		}
	}
	return out
}

func (c *poolCreated) podsSnapshot() []createdPod {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]createdPod, 0, len(c.pods))
	for _, p := range c.pods {
		out = append(out, p)
	}
	return out
}

// printTurnFigures prints each turn's append → transcript seconds and the
// pods created during it: figures, not asserted.
func printTurnFigures(seconds []float64, created *poolCreated, turns, deleteAt int) {
	perTurn := make([]int, turns)
	for _, p := range created.podsSnapshot() {
		if p.stage != stageIdle && p.turn < turns {
			perTurn[p.turn]++
		}
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "turn\tappend -> transcript\tpods created\t\n")
	var sum, most float64
	for i, s := range seconds {
		note := ""
		if i+1 == deleteAt {
			note = "  (worker pod deleted)"
		}
		fmt.Fprintf(w, "%d\t%.2f s\t%d\t%s\n", i+1, s, perTurn[i], note)
		sum += s
		most = max(most, s)
	}
	w.Flush()
	fmt.Fprintf(&b, "worker pods, %d turns: append -> transcript mean %.2f s, max %.2f s; %d Jobs\n",
		len(seconds), sum/float64(max(len(seconds), 1)), most, created.jobCount())
	GinkgoWriter.Print(b.String())
}

// printManagerPoolLines prints what the manager logged about lost leases
// and worker pods since its last start.
func printManagerPoolLines(m *localManager) {
	for _, line := range strings.Split(m.logSinceStart(), "\n") {
		if strings.Contains(line, "worker-pool") || strings.Contains(line, "stopped answering") {
			GinkgoWriter.Println("manager: " + line)
		}
	}
}
