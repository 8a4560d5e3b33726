package e2e

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/testutil/pihost"
)

// A pi user's whole loop where users run it: the real pi 1.6 with the pi
// package (RPC mode, a fake provider) records into a Session it creates
// through the API server; worker Jobs replay it; /tree gives a branch a
// Session of its own; a SessionFork applied with kubectl cuts the first
// Session; /turnlog-open continues the child in pi.
var _ = Describe("a pi user", func() {
	It("records, branches with /tree, forks with kubectl and continues the child in pi", func() {
		tb := GinkgoTB()
		prov := pihost.NewProvider(tb)
		e := pihost.NewEnv(tb, prov, env.storeURL, env.namespace, "pi-chat", "")
		e.Vars = append(e.Vars, "TURNLOG_KUBECONFIG="+env.kubeconfig, "AWS_REGION=us-east-1")
		for k, v := range env.storeCredentials {
			e.Vars = append(e.Vars, k+"="+v)
		}
		e.Exts = append(e.Exts, pihost.TreeExtension())
		pi := e.Start()
		say := func(prompt, answer string) {
			GinkgoHelper()
			prov.Queue(pihost.Reply{Blocks: []pihost.Block{{Kind: "text", Text: answer}}, Stop: "end_turn"})
			pi.Prompt(prompt)
		}

		By("recording three turns, the second with a tool call")
		say("One?", "1")
		prov.Queue(
			pihost.Reply{Blocks: []pihost.Block{
				{Kind: "thinking", Text: "Read the notes first.", Sig: "sig-e2e-1"},
				{Kind: "tool_use", ID: "toolu_e1", Name: "read", Text: `{"path":"notes.txt"}`},
			}, Stop: "tool_use"},
			pihost.Reply{Blocks: []pihost.Block{{Kind: "text", Text: "2"}}, Stop: "end_turn"},
		)
		pi.Prompt("Two?")
		secondRequest := prov.Requests()[1]
		say("Three?", "3")
		one, three := entryWithText(pi, "1"), entryWithText(pi, "3")

		By("going back two turns with /tree and asking again")
		pi.Call(map[string]any{"type": "prompt", "message": "/tree-to " + one})
		say("Two, again?", "2b")
		branch := strings.TrimSpace(kubectl("get", "sessions", "-l", "turnlog.dev/pi-branch-point="+one, "-o", "jsonpath={.items[*].metadata.name}"))
		Expect(branch).NotTo(BeEmpty(), "no Session for the branch /tree went to")
		Expect(kubectl("get", "session", branch, "-o", "jsonpath={.spec.forkedFrom.session}")).To(Equal("pi-chat"))
		branchLeaf := pi.Call(map[string]any{"type": "get_state"})
		file, _ := branchLeaf["sessionFile"].(string)
		newLeaf := entryWithText(pi, "2b")

		By("reading each branch's transcript, replayed by worker Jobs, as pi resumes that leaf")
		for name, leaf := range map[string]string{"pi-chat": three, branch: newLeaf} {
			pc := pihost.ResumeOf(tb, e, file, leaf)
			msgs := currentTranscript(name)
			Expect(pihost.SameAsPi(tb, msgs, pc, pihost.Target(pc))).To(BeEmpty(), "%s's transcript is not pi's resume of %s", name, leaf)
		}

		By("forking pi-chat after its first turn with kubectl apply")
		kubectlWithInput([]byte(`apiVersion: turnlog.dev/v1alpha1
kind: SessionFork
metadata: {name: pi-chat-retry}
spec:
  source: {name: pi-chat}
  atSeq: "1"
`), "apply", "-f", "-")
		Eventually(jsonpath).WithArguments("sessionfork", "pi-chat-retry", `{.status.conditions[?(@.type=="Succeeded")].status}`).Should(Equal("True"))
		currentTranscript("pi-chat-retry")

		By("continuing the child in pi: its first request is pi-chat's second")
		pi.Call(map[string]any{"type": "prompt", "message": "/turnlog-open " + env.namespace + "/pi-chat-retry"})
		prov.Queue(
			pihost.Reply{Blocks: []pihost.Block{{Kind: "text", Text: "2, in the child."}}, Stop: "end_turn"},
		)
		pi.Prompt("Two?")
		requests := prov.Requests()
		childFirst := requests[len(requests)-1]
		for _, k := range []string{"system", "tools", "messages", "model"} {
			Expect(reflect.DeepEqual(childFirst[k], secondRequest[k])).To(BeTrue(),
				"the child's first request differs from pi-chat's second in %q:\nchild  %v\nparent %v", k, childFirst[k], secondRequest[k])
		}
		pi.Quit()
		cut := kubectl("get", "sessionfork", "pi-chat-retry", "-o", "jsonpath={.status.cutSeq}")
		Eventually(func(g Gomega) {
			var head, at int64
			out, err := jsonpath("session", "pi-chat-retry", "{.status.headSeq}")
			g.Expect(err).NotTo(HaveOccurred())
			_, err = fmt.Sscan(out+" "+cut, &head, &at)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(head).To(BeNumerically(">", at), "the child's log goes on from the cut")
		}).Should(Succeed())
	})
})

// entryWithText is the id of the entry on pi's current branch whose first
// content block's text is text.
func entryWithText(pi *pihost.Pi, text string) string {
	GinkgoHelper()
	raw, err := json.Marshal(pi.Call(map[string]any{"type": "get_entries"})["entries"])
	Expect(err).NotTo(HaveOccurred())
	var entries []struct {
		ID      string `json:"id"`
		Message struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	}
	Expect(json.Unmarshal(raw, &entries)).To(Succeed())
	for _, en := range entries {
		var blocks []struct{ Text string }
		if json.Unmarshal(en.Message.Content, &blocks) == nil && len(blocks) > 0 && blocks[0].Text == text {
			return en.ID
		}
	}
	Fail(fmt.Sprintf("pi has no entry saying %q", text))
	return ""
}

// currentTranscript waits until the workers have replayed the Session
// through its head and it is Ready, and returns the transcript they stored,
// as `turnlog transcript` prints it.
func currentTranscript(name string) []replay.Message {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		out, err := jsonpath("session", name, `{.status.conditions[?(@.type=="Ready")].status} {.status.headSeq} {.status.replay.throughSeq}`)
		g.Expect(err).NotTo(HaveOccurred())
		f := strings.Fields(out)
		g.Expect(f).To(HaveLen(3), "session %s: %q", name, out)
		g.Expect(f[0]).To(Equal("True"), "session %s: %q", name, out)
		g.Expect(f[2]).To(Equal(f[1]), "session %s replayed through its head: %q", name, out)
	}).Should(Succeed())
	var tr struct {
		Messages []replay.Message `json:"messages"`
	}
	out := turnlog("transcript", "--session", name)
	Expect(json.Unmarshal([]byte(out), &tr)).To(Succeed(), "turnlog transcript --session %s:\n%s", name, out)
	return tr.Messages
}
