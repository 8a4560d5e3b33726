package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Replay by a pi-ai release line, as worker pods run it. The log is a
// Claude turn then a GPT-5 turn; replayed for GPT-5, Claude's reasoning is
// another model's thinking: pi-ai 1.x drops it, pi-ai 0.73 keeps it as text.
const (
	modelSwitchLog = "testdata/logs/model-switch.jsonl"
	claudeThinking = "Tuesday matches the cache size change."
	claudeAnswer   = "The rise starts with Tuesday's deploy, which halved the cache."
)

// applySession creates a Session for GPT-5 with kubectl apply, naming line
// as its release line unless it is empty.
func applySession(name, line string) {
	GinkgoHelper()
	lineField := ""
	if line != "" {
		lineField = fmt.Sprintf(", releaseLine: %q", line)
	}
	manifest := fmt.Sprintf(`apiVersion: turnlog.dev/v1alpha1
kind: Session
metadata: {name: %s}
spec:
  adapter: {kind: pi-ai, api: openai-responses, provider: openai, model: gpt-5%s}
`, name, lineField)
	kubectlWithInput([]byte(manifest), "apply", "-f", "-")
}

// claudeMessage is the Claude message of `turnlog transcript` for name,
// compacted, once the Session is Ready through the GPT-5 turn.
func claudeMessage(name string) string {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		row := getRow(g, "session", name)
		g.Expect(row).To(HaveKeyWithValue("READY", "True"))
		g.Expect(row).To(HaveKeyWithValue("HEAD", "16"))
	}).Should(Succeed())
	var tr struct {
		Messages []struct {
			Seq     int64           `json:"seq"`
			Message json.RawMessage `json:"message"`
		} `json:"messages"`
	}
	out := turnlog("transcript", "--session", name)
	Expect(json.Unmarshal([]byte(out), &tr)).To(Succeed(), "turnlog transcript --session %s:\n%s", name, out)
	for _, m := range tr.Messages {
		if m.Seq == 7 {
			var compact bytes.Buffer
			Expect(json.Compact(&compact, m.Message)).To(Succeed())
			return compact.String()
		}
	}
	Fail(fmt.Sprintf("turnlog transcript --session %s has no message at seq 7:\n%s", name, out))
	return ""
}

var _ = Describe("a Session naming a release line", func() {
	It("is replayed by worker pods under that line's rules, and again when the line changes", func() {
		log, err := os.ReadFile(filepath.Join(env.root, modelSwitchLog))
		Expect(err).NotTo(HaveOccurred())
		sessions := map[string]string{"line-1": "1", "line-073": "0.73", "line-none": ""}
		for name, line := range sessions {
			applySession(name, line)
			Expect(turnlogWithInput(log, "append", "--session", name)).To(ContainSubstring("appended seq 0..16"))
		}

		By("reading each transcript with turnlog transcript")
		for _, name := range []string{"line-1", "line-none"} {
			msg := claudeMessage(name)
			Expect(msg).To(ContainSubstring(claudeAnswer), name)
			Expect(msg).NotTo(ContainSubstring(claudeThinking), "%s: pi-ai 1.x drops another model's thinking", name)
		}
		msg := claudeMessage("line-073")
		Expect(msg).To(ContainSubstring(`{"type":"text","text":"` + claudeThinking + `"}`))
		Expect(msg).To(ContainSubstring(claudeAnswer))
		Expect(kubectl("get", "session", "line-073", "-o", "jsonpath={.status.replay.adapter.releaseLine}")).To(Equal("0.73"))

		By("moving line-1 to 0.73 with kubectl patch")
		kubectl("patch", "session", "line-1", "--type=merge", "-p", `{"spec":{"adapter":{"releaseLine":"0.73"}}}`)
		Eventually(func(g Gomega) string {
			out, err := jsonpath("session", "line-1", "{.status.replay.adapter.releaseLine}/{.status.conditions[?(@.type=='Ready')].status}")
			g.Expect(err).NotTo(HaveOccurred())
			return out
		}).Should(Equal("0.73/True"))
		Expect(claudeMessage("line-1")).To(ContainSubstring(`{"type":"text","text":"` + claudeThinking + `"}`))
	})

	It("becomes Ready when created as the pi package creates it", func(ctx SpecContext) {
		// pi-turnlog's Kube.session: a POST of exactly this body, the adapter
		// from adapterOf(model) with the 1.x line.
		const name = "pi-created"
		body := fmt.Sprintf(`{"apiVersion":"turnlog.dev/v1alpha1","kind":"Session","metadata":{"namespace":%q,"name":%q},`+
			`"spec":{"adapter":{"kind":"pi-ai","api":"openai-responses","provider":"openai","model":"gpt-5","releaseLine":"1"}}}`, env.namespace, name)
		raw, err := env.clientset.CoreV1().RESTClient().Post().AbsPath("/apis/turnlog.dev/v1alpha1/namespaces", env.namespace, "sessions").
			SetHeader("Content-Type", "application/json").Body([]byte(body)).DoRaw(ctx)
		Expect(err).NotTo(HaveOccurred(), "%s", raw)
		log, err := os.ReadFile(filepath.Join(env.root, modelSwitchLog))
		Expect(err).NotTo(HaveOccurred())
		Expect(turnlogWithInput(log, "append", "--session", name)).To(ContainSubstring("appended seq 0..16"))
		msg := claudeMessage(name)
		Expect(msg).To(ContainSubstring(claudeAnswer))
		Expect(msg).NotTo(ContainSubstring(claudeThinking))
		Expect(strings.TrimSpace(kubectl("get", "session", name, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].reason}"))).To(Equal("Current"))
	})
})
