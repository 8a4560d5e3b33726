package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
)

// A fork in the middle of a long Session, where users run it: the child
// refers to its source's segments and shares its source's transcript
// parts instead of copying them, worker pods take it from there, and a
// host continues it through agenthost as any Session. Its transcript is
// then what an offline replay of its export gives.
var _ = Describe("a fork in the middle of a long Session", Ordered, func() {
	const source, child = "long-history", "long-history-child"

	It("shares its source's history, is continued by a host, and its transcript is the offline replay of its export", func(ctx SpecContext) {
		kube, st := kubeClient(), openHostStore(ctx)
		data := loggen.Log(24_000, 17)
		file := filepath.Join(GinkgoT().TempDir(), "long.jsonl")
		Expect(os.WriteFile(file, data, 0o644)).To(Succeed())
		lines := bytes.SplitAfter(data, []byte("\n"))
		Expect(turnlog("import", "--session", source, file)).To(ContainSubstring(fmt.Sprintf("imported %d events", len(lines)-1)))
		src := openHostedSession(ctx, st, kube, env.namespace, source)
		Eventually(func(g Gomega) { src.expectCurrent(ctx, g, kube) }).WithTimeout(3 * time.Minute).Should(Succeed())

		By("forking at a turn/end in the middle with kubectl apply")
		cut := -1
		for i := len(lines) / 2; i < len(lines); i++ {
			if bytes.Contains(lines[i], []byte(`"type":"turn/end"`)) {
				cut = i
				break
			}
		}
		Expect(cut).To(BeNumerically(">", 0))
		kubectlWithInput(fmt.Appendf(nil, `apiVersion: turnlog.dev/v1alpha1
kind: SessionFork
metadata:
  name: %s
spec:
  source:
    name: %s
  atSeq: "%d"
`, child, source, cut), "apply", "-f", "-")
		Eventually(jsonpath).WithArguments("sessionfork", child, `{.status.conditions[?(@.type=="Succeeded")].status} {.status.prefix} {.status.cutSeq}`).
			WithTimeout(time.Minute).Should(Equal(fmt.Sprintf("True Referenced %d", cut)))
		Expect([]byte(turnlog("export", "--session", child))).To(Equal(bytes.Join(lines[:cut+1], nil)))
		h := openHostedSession(ctx, st, kube, env.namespace, child)
		Eventually(func(g Gomega) { h.expectCurrent(ctx, g, kube) }).WithTimeout(2 * time.Minute).Should(Succeed())

		By("sharing the source's final transcript parts, not copying them")
		Expect(sharedParts(ctx, child, source)).To(BeNumerically(">", 0))

		By("continuing the child with two turns through agenthost")
		appendTurns(ctx, []*hostedSession{h})
		appendTurns(ctx, []*hostedSession{h})
		Eventually(func(g Gomega) { h.expectCurrent(ctx, g, kube) }).WithTimeout(2 * time.Minute).Should(Succeed())

		By("reading the transcript the worker pods stored: the offline replay of the child's export")
		replay := exec.Command(env.turnlog, "replay", "-")
		replay.Stdin = strings.NewReader(turnlog("export", "--session", child))
		replayed, err := replay.Output()
		Expect(err).NotTo(HaveOccurred())
		Expect(turnlog("transcript", "--session", child)).To(Equal(string(replayed)))
		Expect(kubectl("get", "session", child, "-o", "jsonpath={.spec.forkedFrom.session}")).To(Equal(source))
	})
})

// sharedParts is how many of the parts the child's stored transcripts
// list are held by the Session holder.
func sharedParts(ctx context.Context, child, holder string) int {
	GinkgoHelper()
	b, err := store.Open(ctx, env.storeURL, nil)
	Expect(err).NotTo(HaveOccurred())
	defer b.Close()
	uid := kubectl("get", "session", child, "-o", "jsonpath={.metadata.uid}")
	log, err := sessionlog.New(b).Log(sessionlog.Location{Namespace: env.namespace, Session: child, UID: uid})
	Expect(err).NotTo(HaveOccurred())
	names, err := log.ListDerived(ctx, "transcript")
	Expect(err).NotTo(HaveOccurred())
	shared := 0
	for _, name := range names {
		if !strings.HasSuffix(name, "/checkpoint.json") {
			continue
		}
		data, err := log.GetDerived(ctx, name, 0)
		Expect(err).NotTo(HaveOccurred())
		var state derived.ReplayState
		Expect(json.Unmarshal(data, &state)).To(Succeed())
		for _, p := range state.Parts {
			if p.Session == holder {
				shared++
			}
		}
		GinkgoWriter.Printf("%s: %d parts, %d of them %s's\n", name, len(state.Parts), shared, holder)
	}
	return shared
}
