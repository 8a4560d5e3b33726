package e2e

import (
	"strings"

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
		uid := importSample(name)
		expectSessionShows(name, map[string]string{"HEAD": "22", "TURNS": "4", "DEGRADED": "1"})

		By("reading a worker pod's report with kubectl logs")
		pods := strings.Fields(kubectl("get", "pods", "-l", turnlogv1.LabelSession+"="+uid,
			"-o", `jsonpath={range .items[?(@.status.phase=="Succeeded")]}{.metadata.name}{"\n"}{end}`))
		Expect(pods).NotTo(BeEmpty())
		logs := kubectl("logs", pods[0])
		GinkgoWriter.Printf("kubectl logs %s:\n%s\n", pods[0], logs)
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
			Expect(report).To(HaveKey(want), "kubectl logs %s:\n%s", pods[0], logs)
		}
	})
})

var _ = Describe("a worker over its memory limit", func() {
	It("is OOM-killed and reported in status.worker and a WorkerFailed Event", func() {
		m := needContainerNode()
		By("running the manager with workers that allocate past a 32Mi limit")
		Expect(m.restartWith(oomWorkerImage, "--worker-memory-limit=32Mi")).To(Succeed())
		DeferCleanup(func() { Expect(m.restartWith(workerImage)).To(Succeed()) })

		const name = "oom"
		uid := importSample(name)

		By("seeing the worker container terminated as OOMKilled")
		Eventually(func() (string, error) {
			return tryKubectl("get", "pods", "-l", turnlogv1.LabelSession+"="+uid,
				"-o", `jsonpath={range .items[*]}{.status.containerStatuses[0].state.terminated.reason}{" "}{end}`)
		}).Should(ContainSubstring("OOMKilled"))

		By("seeing the failure in status.worker and a WorkerFailed Event")
		Eventually(func(g Gomega) {
			out, err := jsonpath("session", name, "{.status.worker.task} {.status.worker.failures}|{.status.worker.message}")
			g.Expect(err).NotTo(HaveOccurred())
			counts, message, _ := strings.Cut(out, "|")
			g.Expect(strings.Fields(counts)).To(HaveExactElements(Equal("assemble"), Not(Equal("0"))))
			g.Expect(message).To(ContainSubstring("OOMKilled"))
		}).Should(Succeed())
		Eventually(func() (string, error) {
			return tryKubectl("get", "events", "--field-selector", "reason="+turnlogv1.EventWorkerFailed+",involvedObject.name="+name,
				"-o", "jsonpath={.items[*].message}")
		}).Should(ContainSubstring("OOMKilled"))
	})
})
