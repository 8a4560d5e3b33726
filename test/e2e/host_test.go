package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The example agent host (examples/host), built from its own module
// against the public agenthost package, run against the suite's cluster.
var _ = Describe("the example agent host", Ordered, func() {
	const session, child = "host-demo", "host-demo-retry"
	var stdout string

	BeforeAll(func() {
		host := filepath.Join(GinkgoT().TempDir(), "host")
		build := exec.Command("go", "build", "-o", host, "./host")
		build.Dir = filepath.Join(env.root, "examples")
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go build ./host in examples/:\n%s", out)

		run := exec.Command(host, "--kubeconfig", env.kubeconfig, "-n", env.namespace, "--store-url", env.storeURL, "--session", session)
		var o, e bytes.Buffer
		run.Stdout, run.Stderr = &o, &e
		Expect(run.Run()).To(Succeed(), "host: %s", e.String())
		stdout = o.String()
	})

	It("streams two turns, waits for replay, forks at the stopped turn and prints the child's transcript", func() {
		lines := strings.SplitN(stdout, "\n", 5)
		Expect(lines).To(HaveLen(5), stdout)
		// Turn 1: 9 events after session/start (seq 0); turn 2: 6.
		Expect(lines[0]).To(Equal("session/host-demo: streamed 2 turns, seq 0..15 (turn 2 aborted)"))
		Expect(lines[1]).To(Equal("session/host-demo: replayed through seq 15: 3 messages (1 native)"))
		Expect(lines[2]).To(Equal("sessionfork/host-demo-retry: at 14.1, cut at seq 15"))
		Expect(lines[3]).To(Equal("session/host-demo-retry: transcript through seq 15:"))

		var tr struct {
			ThroughSeq int64 `json:"throughSeq"`
			Messages   []struct {
				Role    string          `json:"role"`
				Replay  string          `json:"replay"`
				Message json.RawMessage `json:"message"`
			} `json:"messages"`
		}
		Expect(json.Unmarshal([]byte(lines[4]), &tr)).To(Succeed())
		var roles []string
		for _, m := range tr.Messages {
			roles = append(roles, m.Role+"/"+m.Replay)
		}
		Expect(roles).To(Equal([]string{"user/", "assistant/native", "user/"}))
		var assistant bytes.Buffer
		Expect(json.Compact(&assistant, tr.Messages[1].Message)).To(Succeed())
		Expect(assistant.String()).To(ContainSubstring(`"thinkingSignature":"sig-think-1"`))
		Expect(lines[4]).NotTo(ContainSubstring("Madrid"), "the stopped answer's frozen text is no history")

		By("reading the same transcript with turnlog transcript, and with replay of the export")
		Expect(turnlog("transcript", "--session", child)).To(Equal(lines[4]))
		replay := exec.Command(env.turnlog, "replay", "-")
		replay.Stdin = strings.NewReader(turnlog("export", "--session", child))
		replayed, err := replay.Output()
		Expect(err).NotTo(HaveOccurred())
		Expect(string(replayed)).To(Equal(lines[4]))
		Expect(kubectl("get", "session", child, "-o", "jsonpath={.spec.forkedFrom.session}")).To(Equal(session))
	})
})
