package e2e

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// needContainerNode skips a spec that only a real container runtime can
// prove, and returns the manager the suite restarts with probe images.
func needContainerNode() *localManager {
	GinkgoHelper()
	m, ok := env.manager.(*localManager)
	if !env.containerNode || !ok {
		Skip("needs the local cluster's container node: E2E_NODE=container (make test-e2e)")
	}
	return m
}

// What turnlog promises about a worker pod, as the runtime enforces it: no
// Kubernetes credentials, non-root without capabilities, no privilege
// escalation, RuntimeDefault seccomp, a read-only root filesystem.
var _ = Describe("a worker container", func() {
	It("has no service-account token, runs as 65532 without capabilities and cannot write to /", func() {
		m := needContainerNode()
		By("running the manager with the probe image: the worker's image plus a report first")
		Expect(m.restartWith(slowWorkerImage)).To(Succeed())
		DeferCleanup(func() { Expect(m.restartWith(workerImage)).To(Succeed()) })

		const name = "probed"
		importSample(name)
		expectSessionShows(name, map[string]string{"HEAD": "22", "TURNS": "4", "DEGRADED": "1"})

		By("reading the report of the namespace's worker pod with kubectl logs")
		var pod string
		Eventually(func(g Gomega) {
			pods := poolPodsOf(g, slowWorkerImage)
			g.Expect(pods).NotTo(BeEmpty())
			pod = pods[0]
		}).Should(Succeed())
		logs := kubectl("logs", pod)
		GinkgoWriter.Printf("kubectl logs %s:\n%s\n", pod, logs)
		report := map[string]bool{}
		for _, line := range strings.Split(logs, "\n") {
			if rest, ok := strings.CutPrefix(line, "workerprobe: "); ok {
				report[rest] = true
			}
		}
		for _, want := range []string{
			"uid=65532 gid=65532",
			"CapPrm=0000000000000000",
			"CapEff=0000000000000000",
			"CapBnd=0000000000000000",
			"CapAmb=0000000000000000",
			"NoNewPrivs=1",
			"Seccomp=2", // a filter: RuntimeDefault
			"service-account token absent",
			"write /: open /workerprobe-write: read-only file system",
		} {
			Expect(report).To(HaveKey(want), "kubectl logs %s:\n%s", pod, logs)
		}
		By("seeing the probe become the worker: its log goes on as turnlog worker serve's")
		Expect(logs).To(ContainSubstring("turnlog worker: taking namespace " + env.namespace + "'s runs from " + m.endpoint()))
	})
})

// poolPodsOf returns the Running worker pods of the suite's namespace that
// run image.
func poolPodsOf(g Gomega, image string) []string {
	out, err := tryKubectl("get", "pods", "-l", poolWorkerLabel,
		"-o", `jsonpath={range .items[?(@.status.phase=="Running")]}{.metadata.name} {.spec.containers[0].image}{"\n"}{end}`)
	g.Expect(err).NotTo(HaveOccurred())
	var pods []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if name, img, ok := strings.Cut(line, " "); ok && img == image {
			pods = append(pods, name)
		}
	}
	return pods
}

// A worker that runs out of memory during a run: its container is
// OOM-killed and its lease lost; the run is done again, and after three
// leases lost so, it fails as an attempt the Session reports with the
// pod's OOMKilled.
var _ = Describe("a worker over its memory limit", func() {
	It("is OOM-killed during a run and reported in status.worker and a WorkerFailed Event", func() {
		m := needContainerNode()
		By("running the manager with workers that take a run and allocate past a 32Mi limit")
		Expect(m.restartWith(oomWorkerImage, "--worker-memory-limit=32Mi")).To(Succeed())
		DeferCleanup(func() { Expect(m.restartWith(workerImage)).To(Succeed()) })

		const name = "oom"
		importSample(name)

		By("seeing a worker container terminated as OOMKilled")
		Eventually(func() (string, error) {
			return tryKubectl("get", "pods", "-l", poolWorkerLabel,
				"-o", `jsonpath={range .items[*]}{.status.containerStatuses[0].state.terminated.reason} {.status.containerStatuses[0].lastState.terminated.reason} {end}`)
		}).Should(ContainSubstring("OOMKilled"))

		// Each lease is given up 10 s after its pod was killed, and the
		// run fails once it has lost three: half a minute at least, more
		// with the pods' starts on a busy machine.
		By("seeing the failure in status.worker and a WorkerFailed Event")
		Eventually(func(g Gomega) {
			out, err := jsonpath("session", name, "{.status.worker.task} {.status.worker.failures}|{.status.worker.message}")
			g.Expect(err).NotTo(HaveOccurred())
			counts, message, _ := strings.Cut(out, "|")
			g.Expect(strings.Fields(counts)).To(HaveExactElements(Equal("assemble"), Not(Equal("0"))), out)
			g.Expect(message).To(MatchRegexp(`pod \S+: OOMKilled: over its memory limit`), out)
		}).WithTimeout(5 * time.Minute).WithPolling(time.Second).Should(Succeed())
		Eventually(func() (string, error) {
			return tryKubectl("get", "events", "--field-selector", "reason="+turnlogv1.EventWorkerFailed+",involvedObject.name="+name,
				"-o", "jsonpath={.items[*].message}")
		}).Should(ContainSubstring("OOMKilled"))
		GinkgoWriter.Printf("status.worker: %s\n", kubectl("get", "session", name, "-o", "jsonpath={.status.worker}"))
		for _, line := range lostLeases(m, "") {
			GinkgoWriter.Println("manager: " + line)
		}
	})
})
