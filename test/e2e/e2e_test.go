package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// The sample log has 23 events (seq 0..22) in 4 turns; seq 3 carries a
// legacy replay state, so replay degrades exactly that message, and turn 3
// is aborted at seq 16.
const (
	sampleFile     = "config/samples/support-chat.jsonl"
	sampleForkYAML = "config/samples/turnlog_v1alpha1_sessionfork.yaml"
	// A fork at "15.1" is anchored at seq 15 and cut at the aborted turn's
	// turn/end, seq 16: its child's log is the sample's first 17 lines.
	forkCutLines = 17
)

func readSample() []byte {
	GinkgoHelper()
	data, err := os.ReadFile(filepath.Join(env.root, sampleFile))
	Expect(err).NotTo(HaveOccurred())
	return data
}

// importSample imports the sample log as Session name and returns the
// Session's UID, which labels its worker Jobs and pods.
func importSample(name string) string {
	GinkgoHelper()
	Expect(turnlog("import", "--session", name, filepath.Join(env.root, sampleFile))).
		To(ContainSubstring("imported 23 events"))
	return kubectl("get", "session", name, "-o", "jsonpath={.metadata.uid}")
}

// expectSessionShows waits until `kubectl get session NAME` shows the given
// columns with READY True.
func expectSessionShows(name string, columns map[string]string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		row := getRow(g, "session", name)
		for column, value := range columns {
			g.Expect(row).To(HaveKeyWithValue(column, value))
		}
		g.Expect(row).To(HaveKeyWithValue("READY", "True"))
	}).Should(Succeed())
}

// The sample as a user meets it: imported, worked on by worker pods,
// forked and reported.
var _ = Describe("the sample session", Ordered, func() {
	const source, child = "support-chat", "support-chat-retry"
	var (
		sample    []byte
		sourceLog string
		recorder  *podRecorder
		uid       string
	)

	BeforeAll(func() {
		sample = readSample()
		// The watch starts before the import so that it sees every pod
		// the import leads to from its creation on.
		ctx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		recorder = recordWorkerPods(ctx)
		uid = importSample(source)
	})

	It("runs worker pods to completion and reports the log in kubectl get session", func() {
		By("seeing the assemble and the replay pod Running, then Succeeded")
		Eventually(func(g Gomega) {
			completed := map[string]bool{}
			for _, pod := range recorder.forSession(uid) {
				g.Expect(pod.phases).NotTo(ContainElement(corev1.PodFailed), "pod %s", pod.name)
				running := slices.Index(pod.phases, corev1.PodRunning)
				succeeded := slices.Index(pod.phases, corev1.PodSucceeded)
				if running >= 0 && succeeded > running {
					completed[pod.task] = true
				}
			}
			g.Expect(completed).To(HaveKey("assemble"))
			g.Expect(completed).To(HaveKey("replay"))
		}).Should(Succeed())
		for _, pod := range recorder.forSession(uid) {
			GinkgoWriter.Printf("pod %s (%s): %v\n", pod.name, pod.task, pod.phases)
		}

		By("listing the worker pods as Completed")
		out := kubectl("get", "pods", "-l", turnlogv1.LabelSession+"="+uid, "--no-headers")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		Expect(len(lines)).To(BeNumerically(">=", 2), out)
		for _, line := range lines {
			Expect(strings.Fields(line)).To(HaveExactElements(
				Not(BeEmpty()), Equal("0/1"), Equal("Completed"), Equal("0"), Not(BeEmpty())), out)
		}

		By("showing head, turns and degraded messages in kubectl get session")
		expectSessionShows(source, map[string]string{"HEAD": "22", "TURNS": "4", "LAST END": "stop", "DEGRADED": "1"})

		By("exporting exactly the imported log")
		sourceLog = turnlog("export", "--session", source)
		Expect([]byte(sourceLog)).To(Equal(sample))
	})

	It("forks at a fractional atSeq with kubectl apply", func() {
		kubectl("apply", "-f", filepath.Join(env.root, sampleForkYAML))

		Eventually(jsonpath).WithArguments("sessionfork", child, `{.status.conditions[?(@.type=="Succeeded")].status}`).
			Should(Equal("True"))
		Expect(jsonpath("sessionfork", child, "{.status.anchorSeq} {.status.cutSeq} {.status.cutReason} {.status.childName}")).
			To(Equal("15 16 aborted " + child))

		By("creating the child Session with its origin")
		Expect(jsonpath("session", child, "{.spec.forkedFrom.session} {.spec.forkedFrom.fork} {.spec.forkedFrom.anchorSeq} {.spec.forkedFrom.cutSeq}")).
			To(Equal(source + " " + child + " 15 16"))
		Expect(jsonpath("session", child, `{.metadata.labels.team}`)).To(Equal("support"))

		By("seeding the child with exactly the source's events through the cut")
		Expect([]byte(turnlog("export", "--session", child))).To(Equal(sampleLines(sample, forkCutLines)))

		By("leaving the source's log as it was")
		Expect(turnlog("export", "--session", source)).To(Equal(sourceLog))

		By("working on the child like any Session")
		expectSessionShows(child, map[string]string{"HEAD": "16", "TURNS": "3", "LAST END": "aborted"})
	})

	It("lists the degraded message with kubectl get events --field-selector reason=ReplayDegraded", func() {
		Eventually(func(g Gomega) {
			out, err := tryKubectl("get", "events", "--field-selector", "reason=ReplayDegraded")
			g.Expect(err).NotTo(HaveOccurred())
			var forSource []string
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "session/"+source+" ") {
					forSource = append(forSource, line)
				}
			}
			g.Expect(forSource).To(HaveExactElements(And(
				ContainSubstring("Warning"),
				ContainSubstring("ReplayDegraded"),
				ContainSubstring("seq 3 "),
				ContainSubstring("cause version"),
			)), out)
		}).Should(Succeed())
	})
})

var _ = Describe("a worker pod deleted while it runs", func() {
	It("is replaced by its Job and the Session converges", func() {
		m, ok := env.manager.(*localManager)
		if !ok {
			Skip("needs the local node's slow worker image and a manager the suite starts; E2E_KUBECONFIG selects a deployed manager")
		}
		By("running the manager with workers that start late")
		Expect(m.restartWith(slowWorkerImage)).To(Succeed())
		DeferCleanup(func() { Expect(m.restartWith(workerImage)).To(Succeed()) })

		const name = "pod-deleted"
		uid := importSample(name)

		By("deleting the first worker pod while it is Running")
		var victim, job string
		Eventually(func(g Gomega) {
			out, err := tryKubectl("get", "pods", "-l", turnlogv1.LabelSession+"="+uid,
				"-o", `jsonpath={range .items[?(@.status.phase=="Running")]}{.metadata.name} {.metadata.labels.batch\.kubernetes\.io/job-name}{"\n"}{end}`)
			g.Expect(err).NotTo(HaveOccurred())
			fields := strings.Fields(out)
			g.Expect(fields).To(HaveLen(2))
			victim, job = fields[0], fields[1]
		}).Should(Succeed())
		kubectl("delete", "pod", victim)

		By("seeing the Job run a new pod to completion")
		Eventually(func(g Gomega) {
			out, err := tryKubectl("get", "pods", "-l", "batch.kubernetes.io/job-name="+job,
				"-o", `jsonpath={range .items[?(@.status.phase=="Succeeded")]}{.metadata.name}{"\n"}{end}`)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(strings.Fields(out)).To(HaveExactElements(Not(Equal(victim))))
		}).Should(Succeed())
		// The same Job counts the deleted pod as failed and its replacement
		// as succeeded: the Job controller retried, not the manager.
		// The Job's status catches up with its pods shortly after.
		Eventually(func() (string, error) {
			return jsonpath("job", job, "{.status.failed} {.status.succeeded}")
		}).Should(Equal("1 1"))

		By("seeing the Session converge")
		expectSessionShows(name, map[string]string{"HEAD": "22", "TURNS": "4", "DEGRADED": "1"})
	})
})

var _ = Describe("a fork inside a turn still streaming", func() {
	It("waits with TurnInProgress and completes when turnlog append ends the turn", func() {
		const source, fork = "streaming", "streaming-fork"
		sample := readSample()
		// The first 15 events stop inside turn 3, whose turn/end is seq 16.
		head := sampleLines(sample, 15)
		headFile := filepath.Join(GinkgoT().TempDir(), "head.jsonl")
		Expect(os.WriteFile(headFile, head, 0o600)).To(Succeed())
		Expect(turnlog("import", "--session", source, headFile)).To(ContainSubstring("imported 15 events"))

		forkYAML := fmt.Sprintf(`apiVersion: turnlog.dev/v1alpha1
kind: SessionFork
metadata:
  name: %s
spec:
  source:
    name: %s
  atSeq: "13"
`, fork, source)
		forkFile := filepath.Join(GinkgoT().TempDir(), "fork.yaml")
		Expect(os.WriteFile(forkFile, []byte(forkYAML), 0o600)).To(Succeed())
		kubectl("apply", "-f", forkFile)

		By("waiting, not failing, while the anchor's turn has not ended")
		Eventually(jsonpath).WithArguments("sessionfork", fork,
			`{.status.conditions[?(@.type=="Succeeded")].status} {.status.conditions[?(@.type=="Succeeded")].reason}`).
			Should(Equal("Unknown " + turnlogv1.ReasonTurnInProgress))
		Consistently(func() (string, error) {
			return tryKubectl("get", "sessions", "-l", turnlogv1.LabelFork+"="+fork, "-o", "name")
		}, "3s").Should(BeEmpty())

		By("appending the rest of the log with turnlog append")
		Expect(turnlogWithInput(sample[len(head):], "append", "--session", source)).
			To(ContainSubstring("appended seq 15..22"))

		Eventually(jsonpath).WithArguments("sessionfork", fork, `{.status.conditions[?(@.type=="Succeeded")].status}`).
			Should(Equal("True"))
		Expect(jsonpath("sessionfork", fork, "{.status.anchorSeq} {.status.cutSeq} {.status.cutReason}")).
			To(Equal("13 16 aborted"))
		Expect([]byte(turnlog("export", "--session", fork))).To(Equal(sampleLines(sample, forkCutLines)))
		Expect([]byte(turnlog("export", "--session", source))).To(Equal(sample))
	})
})

var _ = Describe("a manager killed during a fork", func() {
	It("finishes the fork with exactly one child and the source's prefix", func() {
		const source, fork = "crash-source", "crash-fork"
		sample := readSample()
		importSample(source)
		manifest := filepath.Join(GinkgoT().TempDir(), "fork.yaml")
		Expect(os.WriteFile(manifest, []byte(`apiVersion: turnlog.dev/v1alpha1
kind: SessionFork
metadata:
  name: `+fork+`
spec:
  source:
    name: `+source+`
  atSeq: "15.1"
`), 0o644)).To(Succeed())

		By("killing the manager right after kubectl apply")
		kubectl("apply", "-f", manifest)
		Expect(env.manager.kill()).To(Succeed())
		// Where the fork stood when the manager died, for the record.
		state, _ := tryKubectl("get", "sessionforks,sessions")
		GinkgoWriter.Printf("after the kill:\n%s\n", state)

		By("starting the manager again")
		Expect(env.manager.restart()).To(Succeed())
		Eventually(jsonpath).WithArguments("sessionfork", fork, `{.status.conditions[?(@.type=="Succeeded")].status}`).
			Should(Equal("True"))
		expectSessionShows(fork, map[string]string{"HEAD": "16", "TURNS": "3"})

		By("finding exactly one child, holding exactly the prefix")
		Expect(kubectl("get", "sessions", "-l", turnlogv1.LabelFork+"="+fork, "-o", "jsonpath={.items[*].metadata.name}")).
			To(Equal(fork))
		Expect([]byte(turnlog("export", "--session", fork))).To(Equal(sampleLines(sample, forkCutLines)))
		Expect([]byte(turnlog("export", "--session", source))).To(Equal(sample))
	})
})

var _ = Describe("the deployment manifests", func() {
	It("are accepted by the API server in a server-side dry run of config/default", func() {
		// A dry run creates nothing, so the namespace the manifests go to
		// must exist for the namespaced objects to be checked.
		const namespace = "turnlog-system"
		if _, err := tryKubectl("get", "namespace", namespace); err != nil {
			kubectl("create", "namespace", namespace)
		}
		out := kubectl("apply", "-k", filepath.Join(env.root, "config", "default"), "-n", namespace, "--dry-run=server")
		Expect(out).To(MatchRegexp(`(?m)^deployment\.apps/turnlog-manager (created|configured|unchanged) \(server dry run\)$`))
		Expect(out).To(MatchRegexp(`(?m)^customresourcedefinition\.apiextensions\.k8s\.io/sessionforks\.turnlog\.dev (created|configured|unchanged) \(server dry run\)$`))
	})
})

var _ = Describe("a Session that names a store URL", func() {
	It("is refused by kubectl, and the forkedFrom admission policy is in force", func() {
		manifest := filepath.Join(GinkgoT().TempDir(), "session.yaml")
		Expect(os.WriteFile(manifest, []byte(`apiVersion: turnlog.dev/v1alpha1
kind: Session
metadata:
  name: own-bucket
spec:
  storage:
    url: gs://any-bucket?private_key_path=/dev/zero
`), 0o600)).To(Succeed())
		_, err := tryKubectl("apply", "-f", manifest)
		Expect(err).To(MatchError(ContainSubstring(`unknown field "spec.storage.url"`)))
		Expect(kubectl("get", "validatingadmissionpolicybinding", "turnlog-forkedfrom", "-o", "name")).
			To(Equal("validatingadmissionpolicybinding.admissionregistration.k8s.io/turnlog-forkedfrom\n"))
	})
})
