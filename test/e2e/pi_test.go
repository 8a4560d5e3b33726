package e2e

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/test/internal/pihost"
)

// A pi user's whole loop where users run it: the real pi 1.6 with the pi
// package (RPC mode, a fake provider) records into a Session it creates
// through the API server; worker pods replay it; /tree gives a branch a
// Session of its own; a SessionFork applied with kubectl cuts the first
// Session; /turnlog-open continues the child in pi.
var _ = Describe("a pi user", func() {
	It("records, branches with /tree, forks with kubectl and continues the child in pi", func() {
		tb := GinkgoTB()
		prov := pihost.NewProvider(tb)
		e := piEnv(tb, prov, "pi-chat")
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
		one, three := pi.EntryWithText("1"), pi.EntryWithText("3")

		By("going back two turns with /tree and asking again")
		pi.Call(map[string]any{"type": "prompt", "message": "/tree-to " + one})
		say("Two, again?", "2b")
		branch := strings.TrimSpace(kubectl("get", "sessions", "-l", "turnlog.dev/pi-branch-point="+one, "-o", "jsonpath={.items[*].metadata.name}"))
		Expect(branch).NotTo(BeEmpty(), "no Session for the branch /tree went to")
		Expect(kubectl("get", "session", branch, "-o", "jsonpath={.spec.forkedFrom.session}")).To(Equal("pi-chat"))
		branchLeaf := pi.Call(map[string]any{"type": "get_state"})
		file, _ := branchLeaf["sessionFile"].(string)
		newLeaf := pi.EntryWithText("2b")

		By("reading each branch's transcript, replayed by worker pods, as pi resumes that leaf")
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

	It("moves between sessions with /fork, /clone, /resume and /new, each branch a Session", func() {
		tb := GinkgoTB()
		prov := pihost.NewProvider(tb)
		e := piEnv(tb, prov, "pi-walk")

		By("recording, /tree back, /fork, /clone, /resume of the first session, /fork off another branch, /new; a prompt after each")
		w := pihost.WalkSessions(tb, e, prov)

		By("finding one Session per pi session and branch, each forked from the Session that held the copied path")
		var list struct {
			Items []struct {
				Metadata struct {
					Name   string            `json:"name"`
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec struct {
					ForkedFrom *struct {
						Session string `json:"session"`
					} `json:"forkedFrom"`
				} `json:"spec"`
			} `json:"items"`
		}
		Expect(json.Unmarshal([]byte(kubectl("get", "sessions", "-o", "json")), &list)).To(Succeed())
		ours := map[string]bool{}
		for id := range w.Files {
			ours[id] = true
		}
		named, parent := map[string]string{}, map[string]string{}
		for _, s := range list.Items {
			id := s.Metadata.Labels["turnlog.dev/pi-session"]
			if !ours[id] {
				continue // another spec's
			}
			b := ""
			switch {
			case s.Metadata.Name == "pi-walk":
				b = pihost.WalkRoot
			case strings.HasPrefix(s.Metadata.Name, "pi-walk-"):
				b = pihost.WalkBranch
			default:
				for _, c := range []string{pihost.WalkForked, pihost.WalkCloned, pihost.WalkForkedOff, pihost.WalkFresh} {
					if s.Metadata.Name == "pi-"+w.PiSession(c) {
						b = c
					}
				}
			}
			Expect(b).NotTo(BeEmpty(), "Session %s records pi session %s, but no branch of it", s.Metadata.Name, id)
			Expect(named).NotTo(HaveKey(b), "two Sessions for the %s branch: %s and %s", b, named[b], s.Metadata.Name)
			Expect(id).To(Equal(w.PiSession(b)), "Session %s's pi-session label", s.Metadata.Name)
			named[b] = s.Metadata.Name
			if s.Spec.ForkedFrom != nil {
				parent[b] = s.Spec.ForkedFrom.Session
			}
		}
		Expect(named).To(HaveLen(len(w.Prompts())), "Sessions by branch: %v", named)
		Expect(parent).To(Equal(map[string]string{
			pihost.WalkBranch:    named[pihost.WalkRoot],
			pihost.WalkForked:    named[pihost.WalkBranch],
			pihost.WalkCloned:    named[pihost.WalkForked],
			pihost.WalkForkedOff: named[pihost.WalkRoot],
		}), "the Sessions' spec.forkedFrom")

		By("reading each Session's transcript, replayed by worker pods, as pi resumes its branch")
		for b, name := range named {
			file := w.Files[w.PiSession(b)]
			pc := pihost.ResumeOf(tb, e, file, w.Leaves[b])
			msgs := currentTranscript(name)
			Expect(pihost.SameAsPi(tb, msgs, pc, pihost.Target(pc))).To(BeEmpty(), "%s's transcript is not pi's resume of its branch", name)
			var prompts []string
			for _, m := range msgs {
				var um struct {
					Role    string          `json:"role"`
					Content json.RawMessage `json:"content"`
				}
				Expect(json.Unmarshal(m.Message, &um)).To(Succeed())
				if um.Role != "user" {
					continue
				}
				var blocks []struct {
					Text string `json:"text"`
				}
				var text string
				if json.Unmarshal(um.Content, &blocks) == nil && len(blocks) > 0 {
					text = blocks[0].Text
				} else {
					Expect(json.Unmarshal(um.Content, &text)).To(Succeed(), "a user message's content: %s", um.Content)
				}
				prompts = append(prompts, text)
			}
			Expect(prompts).To(Equal(w.Prompts()[b]), "the prompts in %s's transcript", name)
		}
	})
})

// piEnv is a pi installation with the pi package and the /tree-to
// extension, recording into the suite's namespace and store through its
// API server; the Session pi starts with is session.
func piEnv(tb testing.TB, prov *pihost.Provider, session string) *pihost.Env {
	e := pihost.NewEnv(tb, prov, env.storeURL, env.namespace, session, "")
	e.Vars = append(e.Vars, "TURNLOG_KUBECONFIG="+env.kubeconfig, "AWS_REGION=us-east-1")
	for k, v := range env.storeCredentials {
		e.Vars = append(e.Vars, k+"="+v)
	}
	e.Exts = append(e.Exts, pihost.TreeExtension())
	return e
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
