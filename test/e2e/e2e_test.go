package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
// Session's UID.
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

// The sample as a user meets it: imported, worked on by its namespace's
// worker pods, forked and reported.
var _ = Describe("the sample session", Ordered, func() {
	const source, child = "support-chat", "support-chat-retry"
	var (
		sample    []byte
		sourceLog string
		recorder  *podRecorder
	)

	BeforeAll(func() {
		sample = readSample()
		// The watch starts before the import so that it sees every pod
		// the import leads to from its creation on.
		ctx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		recorder = recordPods(ctx)
		importSample(source)
	})

	It("is worked on by the namespace's worker pod, not a Job, and reports the log in kubectl get session", func() {
		By("showing head, turns and degraded messages in kubectl get session")
		expectSessionShows(source, map[string]string{"HEAD": "22", "TURNS": "4", "LAST END": "stop", "DEGRADED": "1"})

		By("seeing the namespace's worker pod Running, from the Deployment " + poolWorkerName + ", and no pod of the Session's own")
		// Pods an earlier manager left (told another token or image) may
		// be there when the watch starts, and be replaced: every pod the
		// import led to is a worker pod of the namespace.
		Eventually(func(g Gomega) {
			var running []string
			for _, pod := range recorder.seen() {
				g.Expect(pod.session).To(BeEmpty(), "pod %s is labelled for one Session", pod.name)
				if !pod.before {
					g.Expect(pod.pool).To(BeTrue(), "pod %s is not a worker pod of the namespace", pod.name)
				}
				if pod.pool && slices.Contains(pod.phases, corev1.PodRunning) {
					running = append(running, pod.name)
				}
			}
			g.Expect(running).NotTo(BeEmpty())
		}).Should(Succeed())
		for _, pod := range recorder.seen() {
			GinkgoWriter.Printf("pod %s (worker pod: %t, there before the import: %t): %v\n", pod.name, pod.pool, pod.before, pod.phases)
		}
		// It stays while the namespace is busy and for the idle timeout
		// after: kubectl lists it Running and ready, the Deployment's.
		Eventually(func(g Gomega) {
			out, err := tryKubectl("get", "pods", "-l", poolWorkerLabel, "--no-headers")
			g.Expect(err).NotTo(HaveOccurred())
			lines := strings.Split(strings.TrimSpace(out), "\n")
			g.Expect(lines).NotTo(BeEmpty(), out)
			for _, line := range lines {
				fields := strings.Fields(line)
				g.Expect(len(fields)).To(BeNumerically(">=", 5), out)
				g.Expect(fields[0]).To(HavePrefix(poolWorkerName+"-"), out)
				g.Expect(fields[1:3]).To(HaveExactElements("1/1", "Running"), out)
			}
			ready, err := jsonpath("deployment", poolWorkerName, "{.status.readyReplicas}")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ready).To(Equal(strconv.Itoa(len(lines))))
		}).Should(Succeed())

		By("creating no Job")
		Expect(kubectl("get", "jobs", "-o", "name")).To(BeEmpty())

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

var _ = Describe("a worker pod killed while it holds a run", func() {
	It("is replaced by its Deployment, the run is done again, and the Session converges", func() {
		m, ok := env.manager.(*localManager)
		if !ok {
			Skip("needs the slow-runs worker image and a manager the suite starts; E2E_KUBECONFIG selects a deployed manager")
		}
		By("running the manager with worker pods that hold each run for a while")
		Expect(m.restartWith(slowRunsWorkerImage)).To(Succeed())
		DeferCleanup(func() { Expect(m.restartWith(workerImage)).To(Succeed()) })

		const name = "pod-killed"
		sample := readSample()
		importSample(name)

		By("seeing a worker pod hold the Session's run in status.worker.pod")
		var victim, run string
		Eventually(func(g Gomega) {
			out, err := jsonpath("session", name, "{.status.worker.pod} {.status.worker.name}")
			g.Expect(err).NotTo(HaveOccurred())
			fields := strings.Fields(out)
			g.Expect(fields).To(HaveLen(2), out)
			victim, run = fields[0], fields[1]
			g.Expect(victim).To(HavePrefix(poolWorkerName + "-"))
		}).Should(Succeed())

		By("kubectl delete pod --grace-period=0 --force of " + victim + " while it holds run " + run)
		_, err := tryKubectl("delete", "pod", victim, "--grace-period=0", "--force")
		Expect(err).NotTo(HaveOccurred())

		By("seeing the Deployment replace it")
		Eventually(func(g Gomega) {
			out, err := tryKubectl("get", "pods", "-l", poolWorkerLabel,
				"-o", `jsonpath={range .items[?(@.status.phase=="Running")]}{.metadata.name}{"\n"}{end}`)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(strings.Fields(out)).To(ContainElement(And(HavePrefix(poolWorkerName+"-"), Not(Equal(victim)))))
		}).Should(Succeed())

		By("seeing the manager give up the lost lease, and the run done again")
		Eventually(func() []string {
			return lostLeases(m, victim)
		}).Should(ContainElement(ContainSubstring(`"run":"` + run + `"`)))
		expectSessionShows(name, map[string]string{"HEAD": "22", "TURNS": "4", "DEGRADED": "1"})

		By("counting no failed attempt, and losing nothing")
		Expect(jsonpath("session", name, "{.status.worker.failures}")).To(BeElementOf("", "0"))
		Expect([]byte(turnlog("export", "--session", name))).To(Equal(sample))
		for _, line := range lostLeases(m, "") {
			GinkgoWriter.Println("manager: " + line)
		}
	})
})

// lostLeases returns the lines the manager logged since its start about a
// lease lost with its pod, of pod if it is not empty.
func lostLeases(m *localManager, pod string) []string {
	var out []string
	for _, line := range strings.Split(m.logSinceStart(), "\n") {
		if strings.Contains(line, "stopped answering during a run") && (pod == "" || strings.Contains(line, `"pod":"`+pod+`"`)) {
			out = append(out, line)
		}
	}
	return out
}

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
