package controllers

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/worker"
)

// Pod worker mode. envtest has no Job controller and no kubelet, so the
// specs play both: they run the worker command the pod spec names, in this
// process, and record the pod's result and the Job's outcome through the
// API as those components would.
var _ = Describe("Session controller with pod workers", Ordered, func() {
	var (
		ns     string
		stores *BucketCache
		sio    *SessionIO
		stop   func()
	)

	BeforeAll(func() {
		ns = newNamespace("pods")
		stores = storesAt("file://" + GinkgoT().TempDir())
		sio = &SessionIO{Client: k8sClient, Stores: stores}
		stop = startManager(ns, Config{
			Stores: stores, WorkerMode: WorkerModePod, PollInterval: time.Hour, WorkerMaxFailures: 2,
			Jobs: JobSettings{
				Image: "ghcr.io/turnlog/turnlog:test", ServiceAccount: "turnlog-worker", CredentialsSecret: "store-credentials",
				Resources:    corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
				BackoffLimit: 2, ActiveDeadlineSeconds: 600, TTLSecondsAfterFinished: 3600,
			},
		})
	})
	AfterAll(func() {
		stop()
		Expect(stores.Close()).To(Succeed())
	})

	unfinishedJobs := func(g Gomega, s *turnlogv1.Session) []batchv1.Job { return unfinishedJobsOf(g, ns, s) }
	theJob := func(s *turnlogv1.Session) batchv1.Job { GinkgoHelper(); return theJobOf(ns, s) }

	It("runs assembly and replay as Jobs under the restricted profile, one at a time, and reports what they stored", func() {
		log := readLog("legacy-flat-state.jsonl")
		session, _, err := sio.Import(ctx, ns, "podded", bytes.NewReader(logLines(log, 5)))
		Expect(err).NotTo(HaveOccurred())

		job := theJob(session)
		Expect(job.Name).To(MatchRegexp(`^podded-assemble-[0-9a-f]{10}$`))
		Expect(job.Labels).To(HaveKeyWithValue(turnlogv1.LabelTask, "assemble"))
		Expect(job.OwnerReferences).To(ConsistOf(HaveField("UID", session.UID)))
		Expect(*job.Spec.BackoffLimit).To(Equal(int32(2)))
		Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(600)))
		Expect(*job.Spec.TTLSecondsAfterFinished).To(Equal(int32(3600)))
		pod := job.Spec.Template.Spec
		Expect(pod.AutomountServiceAccountToken).To(Equal(ptr.To(false)))
		Expect(pod.ServiceAccountName).To(Equal("turnlog-worker"))
		Expect(pod.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
		Expect(pod.SecurityContext.RunAsNonRoot).To(Equal(ptr.To(true)))
		Expect(pod.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
		Expect(pod.Containers).To(HaveLen(1))
		c := pod.Containers[0]
		Expect(c.Image).To(Equal("ghcr.io/turnlog/turnlog:test"))
		Expect(c.Args[:2]).To(Equal([]string{"worker", "assemble"}))
		Expect(c.SecurityContext.ReadOnlyRootFilesystem).To(Equal(ptr.To(true)))
		Expect(c.SecurityContext.AllowPrivilegeEscalation).To(Equal(ptr.To(false)))
		Expect(c.SecurityContext.Capabilities.Drop).To(Equal([]corev1.Capability{"ALL"}))
		Expect(c.EnvFrom).To(ConsistOf(HaveField("SecretRef.Name", "store-credentials")))
		Expect(c.Resources.Limits.Memory().String()).To(Equal("256Mi"))
		Eventually(func(g Gomega) {
			s := getSession(ns, "podded")(g)
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("False/WorkPending"))
			g.Expect(s.Status.Worker).To(Equal(&turnlogv1.WorkerRun{Task: "assemble", Name: job.Name}))
		}).Should(Succeed())

		By("appending while the Job runs: still one Job")
		_, _, err = sio.Append(ctx, ns, "podded", bytes.NewReader(bytes.TrimPrefix(log, logLines(log, 5))))
		Expect(err).NotTo(HaveOccurred())
		Consistently(func(g Gomega) []batchv1.Job { return unfinishedJobs(g, session) }, "2s").Should(
			ConsistOf(HaveField("Name", job.Name)))

		By("playing the kubelet for each Job until the Session is Ready")
		var tasks []string
		for i := 0; i < 6 && cond(getSession(ns, "podded")(Default).Status.Conditions, turnlogv1.ConditionReady) != "True/Current"; i++ {
			job := theJob(session)
			tasks = append(tasks, job.Labels[turnlogv1.LabelTask])
			msg := runWorkerPod(&job, 0)
			Expect(msg).To(HavePrefix(`{"task":"` + job.Labels[turnlogv1.LabelTask] + `"`))
			Expect(len(msg)).To(BeNumerically("<=", 4096))
			Eventually(func(g Gomega) bool {
				s := getSession(ns, "podded")(g)
				return s.Status.Worker == nil || s.Status.Worker.Name != job.Name
			}).Should(BeTrue())
		}
		Expect(tasks).To(ContainElements("assemble", "replay"))
		s := waitReady(ns, "podded")
		Expect(*s.Status.AssembledThroughSeq).To(Equal(int64(11)))
		Expect(s.Status.Replay.Degraded).To(Equal(int64(1)))
		Expect(s.Status.Replay.DegradedSeqs.Version).To(Equal([]int64{3}))
		Eventually(sessionEvents(ns, "podded", turnlogv1.EventReplayDegraded)).Should(HaveLen(1))
	})

	It("retries a failed worker run and reports the failure in status", func() {
		session, _, err := sio.Import(ctx, ns, "flaky", bytes.NewReader(readLog("aborted-turn.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		job := theJob(session)
		runWorkerPod(&job, 1)

		Eventually(func(g Gomega) {
			s := getSession(ns, "flaky")(g)
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("False/WorkerFailed"))
			g.Expect(s.Status.Worker).NotTo(BeNil())
			g.Expect(s.Status.Worker.Failures).To(Equal(int32(1)))
			g.Expect(s.Status.Worker.Message).To(ContainSubstring("unsupported scheme"))
		}).Should(Succeed())
		Eventually(sessionEvents(ns, "flaky", turnlogv1.EventWorkerFailed)).Should(ConsistOf(
			HaveField("Note", ContainSubstring("assemble run "+job.Name+" failed (attempt 1)"))))

		By("seeing the same run retried as a new Job")
		retry := theJob(session)
		Expect(retry.Name).To(Equal(job.Name))
		Expect(retry.UID).NotTo(Equal(job.UID))
		runWorkerPod(&retry, 0)
		Eventually(func(g Gomega) *turnlogv1.WorkerRun { return getSession(ns, "flaky")(g).Status.Worker }).
			Should(HaveField("Task", "replay"))
		replay := theJob(session)
		runWorkerPod(&replay, 0)
		s := waitReady(ns, "flaky")
		Expect(s.Status.Worker).To(BeNil())
		Expect(*s.Status.HeadSeq).To(Equal(int64(21)))
	})

	It("stops retrying a run after --worker-max-failures attempts, until the Session is nudged", func() {
		session, _, err := sio.Import(ctx, ns, "doomed", bytes.NewReader(readLog("aborted-turn.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		first := theJob(session)
		runWorkerPod(&first, 1)
		second := theJob(session)
		Expect(second.UID).NotTo(Equal(first.UID))
		runWorkerPod(&second, 1)

		Eventually(func(g Gomega) {
			s := getSession(ns, "doomed")(g)
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("False/WorkerFailedPermanently"))
			g.Expect(s.Status.Worker.Failures).To(Equal(int32(2)))
			g.Expect(s.Status.Worker.RetryAt).To(BeNil())
		}).Should(Succeed())
		Eventually(sessionEvents(ns, "doomed", turnlogv1.EventWorkerFailedPermanently)).Should(ConsistOf(
			And(HaveField("Type", "Warning"), HaveField("Note", ContainSubstring("assemble run "+first.Name+" failed 2 times and is not retried")))))
		// Longer than the backoff a third attempt would have waited (10s).
		Consistently(func(g Gomega) []batchv1.Job { return unfinishedJobs(g, session) }, 12*time.Second, time.Second).Should(BeEmpty())

		By("nudging the Session: the run gets its attempts afresh")
		s := getSession(ns, "doomed")(Default)
		patch := client.MergeFrom(s.DeepCopy())
		s.Annotations[turnlogv1.AnnotationRequestedAt] = time.Now().UTC().Format(time.RFC3339Nano)
		Expect(k8sClient.Patch(ctx, s, patch)).To(Succeed())
		third := theJob(session)
		Expect(third.Name).To(Equal(first.Name))
		runWorkerPod(&third, 0)
		Eventually(func(g Gomega) *turnlogv1.WorkerRun { return getSession(ns, "doomed")(g).Status.Worker }).
			Should(HaveField("Task", "replay"))
		replay := theJob(session)
		runWorkerPod(&replay, 0)
		waitReady(ns, "doomed")
	})

	It("retries a run that finished short of the head it was started for, instead of waiting on it", func() {
		session, _, err := sio.Import(ctx, ns, "short", bytes.NewReader(readLog("aborted-turn.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		job := theJob(session)
		By("a worker that saw none of the log, as one reading a log whose objects were missing did")
		runWorkerPodOn(&job, "file://"+GinkgoT().TempDir())
		Eventually(func(g Gomega) {
			s := getSession(ns, "short")(g)
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("False/WorkerFailed"))
			g.Expect(s.Status.Worker).NotTo(BeNil())
			g.Expect(s.Status.Worker.Failures).To(Equal(int32(1)))
			g.Expect(s.Status.Worker.Message).To(ContainSubstring("finished short of head=21: no assembly is stored"))
		}).Should(Succeed())
		Eventually(sessionEvents(ns, "short", turnlogv1.EventWorkerFailed)).Should(ConsistOf(
			HaveField("Note", ContainSubstring("assemble run "+job.Name+" failed (attempt 1)"))))

		By("the run starting again under the same name after its backoff")
		retry := theJob(session)
		Expect(retry.Name).To(Equal(job.Name))
		Expect(retry.UID).NotTo(Equal(job.UID))
		runWorkerPod(&retry, 0)
		Eventually(func(g Gomega) *turnlogv1.WorkerRun { return getSession(ns, "short")(g).Status.Worker }).
			Should(HaveField("Task", "replay"))
		replay := theJob(session)
		runWorkerPod(&replay, 0)
		Expect(*waitReady(ns, "short").Status.AssembledThroughSeq).To(Equal(int64(21)))
	})

	It("replays by the release line the Session names, through the command line its Jobs carry", func() {
		transcripts := map[string]string{}
		for _, line := range []string{"1", "0.73"} {
			name := "line-" + strings.ReplaceAll(line, ".", "")
			Expect(k8sClient.Create(ctx, &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: turnlogv1.SessionSpec{Adapter: turnlogv1.Adapter{Kind: "pi-ai", API: "openai-responses", Provider: "openai", Model: "gpt-5", ReleaseLine: line}}})).To(Succeed())
			session, _, err := sio.Import(ctx, ns, name, bytes.NewReader(readLog("model-switch.jsonl")))
			Expect(err).NotTo(HaveOccurred())
			for i := 0; i < 6 && cond(getSession(ns, name)(Default).Status.Conditions, turnlogv1.ConditionReady) != "True/Current"; i++ {
				job := theJob(session)
				if job.Labels[turnlogv1.LabelTask] == "replay" {
					Expect(job.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--target-release-line=" + line))
				}
				runWorkerPod(&job, 0)
				Eventually(func(g Gomega) bool {
					s := getSession(ns, name)(g)
					return s.Status.Worker == nil || s.Status.Worker.Name != job.Name
				}).Should(BeTrue())
			}
			s := waitReady(ns, name)
			Expect(s.Status.Replay.Adapter.ReleaseLine).To(Equal(line))
			tr, _, err := sio.Transcript(ctx, ns, name, func(a turnlog.Adapter) turnlog.Adapter { return a })
			Expect(err).NotTo(HaveOccurred())
			Expect(tr.Messages[1].Seq).To(Equal(int64(7)))
			transcripts[line] = string(tr.Messages[1].Message)
		}
		// Claude's reasoning, replayed for GPT-5: dropped by pi-ai 1.x, text
		// for pi-ai 0.73.
		Expect(transcripts["1"]).To(ContainSubstring(`"content":[{"type":"text","text":"The rise starts with Tuesday's deploy, which halved the cache."}]`))
		Expect(transcripts["0.73"]).To(ContainSubstring(`"content":[{"type":"text","text":"Tuesday matches the cache size change."},{"type":"text","text":"The rise starts`))
	})

	It("creates a worker Job again when it vanishes", func() {
		session, _, err := sio.Import(ctx, ns, "vanishing", bytes.NewReader(readLog("aborted-turn.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		job := theJob(session)
		Expect(k8sClient.Delete(ctx, &job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		again := theJob(session)
		Expect(again.Name).To(Equal(job.Name))
		Expect(again.UID).NotTo(Equal(job.UID))
	})
})

// A Session whose worker run failed --worker-max-failures times waits for
// an append, a nudge or a spec change: until then it is polled as cheaply
// as an idle Session, and an append without a nudge still gets a new run.
var _ = Describe("A Session whose worker run gave up", Ordered, func() {
	var (
		ns      string
		stores  *BucketCache
		counted countedStores
		sio     *SessionIO
		stop    func()
		conf    Config
	)
	BeforeAll(func() {
		ns = newNamespace("gave-up")
		stores, counted = countedStoresAt()
		sio = &SessionIO{Client: k8sClient, Stores: stores}
		conf = Config{
			Stores: counted, WorkerMode: WorkerModePod, PollInterval: 100 * time.Millisecond, MaxPollInterval: 500 * time.Millisecond, WorkerMaxFailures: 1,
			Jobs: JobSettings{Image: "ghcr.io/turnlog/turnlog:test", BackoffLimit: 0, ActiveDeadlineSeconds: 600},
		}
		stop = startManager(ns, conf)
	})
	AfterAll(func() {
		stop()
		Expect(stores.Close()).To(Succeed())
	})

	It("costs one store request per poll, and an append gets a new run", func() {
		session, _, err := sio.Import(ctx, ns, "gave-up", bytes.NewReader(readLog("aborted-turn.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		failed := theJobOf(ns, session)
		runWorkerPod(&failed, 1)
		Eventually(func(g Gomega) string {
			return cond(getSession(ns, "gave-up")(g).Status.Conditions, turnlogv1.ConditionReady)
		}).Should(Equal("False/WorkerFailedPermanently"))
		// Until the cache has caught up with the last status patch, a
		// reconcile may find a stale status and look at the log in full.
		time.Sleep(2 * conf.MaxPollInterval)

		before := getSession(ns, "gave-up")(Default).ResourceVersion
		counted.bucket.Reset()
		time.Sleep(4 * conf.MaxPollInterval)
		expectOnlyProbes(counted.bucket.Counts(), 1)
		Expect(getSession(ns, "gave-up")(Default).ResourceVersion).To(Equal(before), "the Session was not written")
		Expect(unfinishedJobsOf(Default, ns, session)).To(BeEmpty())

		By("appending a turn without a nudge")
		log, err := sessionlog.New(counted.bucket).Log(sessionlog.Location{Namespace: ns, Session: "gave-up", UID: string(session.UID)})
		Expect(err).NotTo(HaveOccurred())
		head, err := log.Head(ctx)
		Expect(err).NotTo(HaveOccurred())
		_, err = log.NewAppender("").Append(ctx, []byte(fmt.Sprintf(`{"type":"turn/start","turn":%d}`, head.Turns+1)), []byte(fmt.Sprintf(`{"type":"turn/end","turn":%d,"reason":"aborted"}`, head.Turns+1)))
		Expect(err).NotTo(HaveOccurred())
		next := theJobOf(ns, session)
		Expect(next.Name).NotTo(Equal(failed.Name))
		runWorkerPod(&next, 0)
		replay := theJobOf(ns, session)
		runWorkerPod(&replay, 0)
		s := waitReady(ns, "gave-up")
		Expect(*s.Status.HeadSeq).To(Equal(head.Head() + 2))
	})
})

// A namespace's worker Jobs (--namespace-worker-runs) go to its Sessions
// in the order they asked: a Session whose host keeps appending cannot
// take every slot that frees from the Sessions that waited behind it (a
// fork's child behind its busy source, say).
var _ = Describe("Sessions waiting for their namespace's worker Jobs", Ordered, func() {
	It("get them in the order they asked, not the Session whose Job just finished", func() {
		ns := newNamespace("in-line")
		stores := storesAt("file://" + GinkgoT().TempDir())
		DeferCleanup(func() { Expect(stores.Close()).To(Succeed()) })
		sio := &SessionIO{Client: k8sClient, Stores: stores}
		stop := startManager(ns, Config{
			Stores: stores, WorkerMode: WorkerModePod, PollInterval: time.Hour, Limits: Limits{NamespaceWorkerRuns: 1},
			Jobs: JobSettings{Image: "ghcr.io/turnlog/turnlog:test", BackoffLimit: 0, ActiveDeadlineSeconds: 600},
		})
		DeferCleanup(stop)
		log := readLog("legacy-flat-state.jsonl")

		busy, _, err := sio.Import(ctx, ns, "busy", bytes.NewReader(logLines(log, 5)))
		Expect(err).NotTo(HaveOccurred())
		first := theJobOf(ns, busy)
		waiting, _, err := sio.Import(ctx, ns, "waiting", bytes.NewReader(logLines(log, 5)))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			c := apimeta.FindStatusCondition(getSession(ns, "waiting")(g).Status.Conditions, turnlogv1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(turnlogv1.ReasonWorkQueued))
			g.Expect(c.Message).To(ContainSubstring("namespace %s has 1 worker Jobs going (--namespace-worker-runs=1)", ns))
		}).Should(Succeed())

		By("the busy Session's host appending while its Job runs, then the Job finishing")
		_, _, err = sio.Append(ctx, ns, "busy", bytes.NewReader(bytes.TrimPrefix(log, logLines(log, 5))))
		Expect(err).NotTo(HaveOccurred())
		runWorkerPod(&first, 0)

		By("the slot going to the Session that waited")
		next := theJobOf(ns, waiting)
		Consistently(func(g Gomega) []batchv1.Job { return unfinishedJobsOf(g, ns, busy) }, "3s").Should(BeEmpty())
		Expect(cond(getSession(ns, "busy")(Default).Status.Conditions, turnlogv1.ConditionReady)).To(Equal("False/WorkQueued"))

		By("playing the kubelet for whichever Job is going until both are Ready")
		runWorkerPod(&next, 0)
		current := func(g Gomega) bool {
			return cond(getSession(ns, "busy")(g).Status.Conditions, turnlogv1.ConditionReady) == "True/Current" &&
				cond(getSession(ns, "waiting")(g).Status.Conditions, turnlogv1.ConditionReady) == "True/Current"
		}
		for range 8 {
			var going []batchv1.Job
			Eventually(func(g Gomega) {
				var jobs batchv1.JobList
				g.Expect(k8sClient.List(ctx, &jobs, client.InNamespace(ns))).To(Succeed())
				going = slices.DeleteFunc(jobs.Items, func(j batchv1.Job) bool {
					return jobCondition(&j, batchv1.JobComplete) || jobCondition(&j, batchv1.JobFailed)
				})
				g.Expect(len(going) == 1 || len(going) == 0 && current(g)).To(BeTrue(), "Jobs going: %d", len(going))
			}).Should(Succeed())
			if len(going) == 0 {
				break
			}
			runWorkerPod(&going[0], 0)
		}
		Expect(*waitReady(ns, "busy").Status.AssembledThroughSeq).To(Equal(int64(11)))
		waitReady(ns, "waiting")
	})
})

// A manager that tells its workers something new (a flag an earlier
// release left out, a store moved to another URL) names its runs anew: a
// Session stuck on a run the earlier manager gave up on is replayed without
// a nudge.
var _ = Describe("A Session whose run an earlier manager gave up on", Ordered, func() {
	It("gets a new run, with its attempts afresh, from a manager whose worker command line differs", func() {
		ns := newNamespace("upgraded")
		dir := GinkgoT().TempDir()
		settings := JobSettings{Image: "ghcr.io/turnlog/turnlog:test", BackoffLimit: 0, ActiveDeadlineSeconds: 600}
		before := storesAt("file://" + dir)
		DeferCleanup(func() { Expect(before.Close()).To(Succeed()) })
		stop := startManager(ns, Config{Stores: before, WorkerMode: WorkerModePod, PollInterval: time.Hour, WorkerMaxFailures: 1, Jobs: settings})
		sio := &SessionIO{Client: k8sClient, Stores: before}
		session, _, err := sio.Import(ctx, ns, "stuck", bytes.NewReader(readLog("aborted-turn.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		failed := theJobOf(ns, session)
		runWorkerPod(&failed, 1)
		Eventually(func(g Gomega) string {
			return cond(getSession(ns, "stuck")(g).Status.Conditions, turnlogv1.ConditionReady)
		}).Should(Equal("False/WorkerFailedPermanently"))
		stop()

		By("starting a manager whose workers are given the same store under another URL")
		after := storesAt("file://" + dir + "?create_dir=true")
		DeferCleanup(func() { Expect(after.Close()).To(Succeed()) })
		stop = startManager(ns, Config{Stores: after, WorkerMode: WorkerModePod, PollInterval: time.Hour, WorkerMaxFailures: 1, Jobs: settings})
		DeferCleanup(stop)
		for i := 0; i < 4 && cond(getSession(ns, "stuck")(Default).Status.Conditions, turnlogv1.ConditionReady) != "True/Current"; i++ {
			job := theJobOf(ns, session)
			Expect(job.Name).NotTo(Equal(failed.Name))
			Expect(job.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--store-url=file://" + dir + "?create_dir=true"))
			runWorkerPod(&job, 0)
			Eventually(func(g Gomega) bool {
				s := getSession(ns, "stuck")(g)
				return s.Status.Worker == nil || s.Status.Worker.Name != job.Name
			}).Should(BeTrue())
		}
		Expect(*waitReady(ns, "stuck").Status.AssembledThroughSeq).To(Equal(int64(21)))
	})
})

// unfinishedJobsOf lists the worker Jobs of a Session still running.
func unfinishedJobsOf(g Gomega, ns string, s *turnlogv1.Session) []batchv1.Job {
	jobs := &batchv1.JobList{}
	g.Expect(k8sClient.List(ctx, jobs, client.InNamespace(ns), client.MatchingLabels{turnlogv1.LabelSession: string(s.UID)})).To(Succeed())
	var out []batchv1.Job
	for _, j := range jobs.Items {
		if !jobCondition(&j, batchv1.JobComplete) && !jobCondition(&j, batchv1.JobFailed) {
			out = append(out, j)
		}
	}
	return out
}

// theJobOf waits for the one unfinished Job of a Session.
func theJobOf(ns string, s *turnlogv1.Session) batchv1.Job {
	GinkgoHelper()
	var job batchv1.Job
	Eventually(func(g Gomega) {
		jobs := unfinishedJobsOf(g, ns, s)
		g.Expect(jobs).To(HaveLen(1))
		job = jobs[0]
	}).Should(Succeed())
	return job
}

var terminationPathArg = regexp.MustCompile(`^--termination-message-path=`)

// runWorkerPod plays the kubelet and the Job controller for one Job: it
// runs the container's command (the image's entrypoint is turnlog, so the
// args are a turnlog command line), records the pod with its exit code and
// termination message, and marks the Job complete or failed. failWith != 0
// makes the run fail the way a pod without store access does: the store URL
// it is given does not open. It returns the termination message.
func runWorkerPod(job *batchv1.Job, failWith int) string {
	GinkgoHelper()
	return runWorker(job, failWith, "")
}

// runWorkerPodOn runs the Job's pod with the store at storeURL in place of
// the Session's: a worker that reads another log than the controller did.
func runWorkerPodOn(job *batchv1.Job, storeURL string) string {
	GinkgoHelper()
	return runWorker(job, 0, storeURL)
}

func runWorker(job *batchv1.Job, failWith int, storeURL string) string {
	GinkgoHelper()
	c := job.Spec.Template.Spec.Containers[0]
	Expect(c.Args[0]).To(Equal("worker"))
	termination := filepath.Join(GinkgoT().TempDir(), "termination-log")
	args := make([]string, 0, len(c.Args))
	for _, a := range c.Args[1:] {
		switch {
		case terminationPathArg.MatchString(a):
			Expect(a).To(HaveSuffix("=" + c.TerminationMessagePath))
			a = "--termination-message-path=" + termination // where the kubelet mounts it
		case failWith != 0 && strings.HasPrefix(a, "--store-url="):
			a = "--store-url=unreachable://bucket"
		case storeURL != "" && strings.HasPrefix(a, "--store-url="):
			a = "--store-url=" + storeURL
		}
		args = append(args, a)
	}
	var stdout, stderr bytes.Buffer
	code := worker.Command(ctx, args, &stdout, &stderr)
	Expect(code).To(Equal(failWith), "worker %v: %s", args, stderr.String())
	msg, err := os.ReadFile(termination)
	Expect(err).NotTo(HaveOccurred())

	now := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: job.Name + "-", Namespace: job.Namespace,
			Labels: map[string]string{"batch.kubernetes.io/job-name": job.Name, "job-name": job.Name},
		},
		Spec: job.Spec.Template.Spec,
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodSucceeded,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: int32(code), Message: string(msg), StartedAt: now, FinishedAt: now,
			}},
		}},
	}
	if code != 0 {
		pod.Status.Phase = corev1.PodFailed
	}
	Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())

	job.Status.StartTime = &now
	if code == 0 {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &now
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
		}
	}
	Expect(k8sClient.Status().Update(ctx, job)).To(Succeed())
	return string(msg)
}
