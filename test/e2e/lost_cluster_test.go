package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/test/internal/hostturn"
	"github.com/turnlog/turnlog/test/internal/pihost"
)

// A cluster lost with its etcd, as an operator meets it: the manager and
// every control-plane process gone, etcd's data deleted, a new control
// plane on the same machine with only the CRDs, the manager installed
// again, and `turnlog adopt` pointed at the same store. What was there
// before comes back from the store alone: a pi session and its /tree
// branch, a fork and a fork of that fork, a host's Session in the middle
// of a turn; the host and pi go on with them, and a new fork is cut.
var _ = Describe("a cluster lost with its etcd (container node)", func() {
	It("gets every Session back with turnlog adopt: lineage and transcripts as they were, nothing rewritten, hosts and pi going on", func(ctx SpecContext) {
		if !env.containerNode {
			Skip("losing the control plane needs the local cluster's container node (E2E_NODE=container)")
		}
		const (
			source, fork, forkOfFork, after = "lost-src", "lost-src-retry", "lost-src-retry-again", "lost-src-after"
			hosted, piChat                  = "lost-host", "lost-pi"
		)
		tb := GinkgoTB()
		kube, st := kubeClient(), openHostStore(ctx)

		By("importing a log, forking it and forking the fork with kubectl apply")
		sample := readSample()
		importSample(source)
		applyFork(fork, source, "13")
		applyFork(forkOfFork, fork, "5")

		By("recording in pi, and branching with /tree")
		prov := pihost.NewProvider(tb)
		e := piEnv(tb, prov, piChat)
		pi := e.Start()
		say := func(p *pihost.Pi, prompt, answer string) {
			GinkgoHelper()
			prov.Queue(pihost.Reply{Blocks: []pihost.Block{{Kind: "text", Text: answer}}, Stop: "end_turn"})
			p.Prompt(prompt)
		}
		say(pi, "One?", "1")
		say(pi, "Two?", "2")
		one := pi.EntryWithText("1")
		pi.Call(map[string]any{"type": "prompt", "message": "/tree-to " + one})
		say(pi, "Two, again?", "2b")
		pi.Quit()
		branch := strings.TrimSpace(kubectl("get", "sessions", "-l", "turnlog.dev/pi-branch-point="+one, "-o", "jsonpath={.items[*].metadata.name}"))
		Expect(branch).NotTo(BeEmpty(), "no Session for the branch /tree went to")

		By("a host streaming two turns and stopping inside its third")
		host := createHostedSession(ctx, st, kube, env.namespace, hosted)
		appendTurns(ctx, []*hostedSession{host})
		appendTurns(ctx, []*hostedSession{host})
		expectAllCurrent(ctx, kube, []*hostedSession{host})
		streamed, finish := hostturn.Events(host.turns + 1)
		Expect(host.appender.Add(ctx, streamed...)).To(Succeed())
		Expect(host.appender.Flush(ctx)).To(Succeed())
		midTurn, err := host.log.Head(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(midTurn.Next-1).To(BeNumerically(">", host.head.LastTurnEnd), "the third turn's first events are stored")
		// Only a turn's end nudges the Session; the open turn's events are
		// shown once the manager has read them, as after a nudge.
		kubectl("annotate", "session", hosted, "--overwrite", turnlogv1.AnnotationRequestedAt+"="+sessionio.RequestedAt(time.Now()))
		Eventually(jsonpath).WithArguments("session", hosted, "{.status.headSeq}").Should(Equal(fmt.Sprint(midTurn.Next - 1)))

		ours := []string{source, fork, forkOfFork, piChat, branch, hosted}
		before := map[string]lostSession{}
		for _, name := range ours {
			before[name] = readLostSession(ctx, name)
		}

		By("losing the cluster: the manager stopped, the control plane killed, etcd's data deleted, a new control plane started")
		m := env.manager.(*localManager)
		Expect(m.stop()).To(Succeed())
		Expect(env.cluster.LoseControlPlane(ctx)).To(Succeed())
		Expect(tryKubectl("get", "namespace", env.namespace)).Error().To(MatchError(ContainSubstring("NotFound")))
		Expect(m.start(m.image)).To(Succeed())

		By("listing with --dry-run what adoption would create, creating nothing")
		adopt := func(extra ...string) string {
			GinkgoHelper()
			return turnlog("adopt", extra...) // in the suite's namespace (-n)
		}
		dry := adopt("--dry-run")
		for _, name := range ours {
			Expect(dry).To(ContainSubstring("session/"+name+" "), "the dry run lists %s", name)
		}
		Expect(dry).To(MatchRegexp(`adopt: would create \d+ Sessions and 1 namespaces`))
		Expect(tryKubectl("get", "namespace", env.namespace)).Error().To(HaveOccurred(), "a dry run creates nothing")

		By("adopting the store's Sessions into the new cluster")
		out := adopt()
		// The suite's other specs' Sessions in the namespace come back too.
		Expect(out).To(MatchRegexp(`adopt: created \d+ Sessions and 1 namespaces, restored 0, 0 already adopted`))
		for _, name := range ours {
			Expect(out).To(ContainSubstring("session/"+name+" created in namespace "+env.namespace+" from the log at uid "+before[name].logUID), "adopt's line for %s", name)
		}
		_, err = env.clientset.CoreV1().Secrets(env.namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: workerCredentialsSecret, Namespace: env.namespace},
			StringData: env.storeCredentials,
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		By("finding each Session Current again, with its lineage, its log and its transcript as before, and nothing under its root rewritten")
		for _, name := range ours {
			was, now := before[name], readLostSession(ctx, name)
			Expect(now.uid).NotTo(Equal(was.uid), "%s is a new object", name)
			Expect(now.logUID).To(Equal(was.logUID), "%s reads its old log", name)
			Expect(now.forkedFrom).To(Equal(was.forkedFrom), "%s's spec.forkedFrom", name)
			Expect(now.labels).To(Equal(was.labels), "%s's labels", name)
			Expect(now.headSeq).To(Equal(was.headSeq), "%s's head", name)
			Expect(now.transcript).To(Equal(was.transcript), "%s's transcript", name)
			Expect(now.objects).To(Equal(was.objects), "%s: the objects under its root (session.json aside)", name)
		}

		By("adopting again, which changes nothing")
		Expect(adopt()).To(MatchRegexp(`adopt: created 0 Sessions and 0 namespaces, restored 0, \d+ already adopted`))

		By("the host finishing the turn it was in the middle of")
		Expect(host.appender.Add(ctx, finish...)).To(Succeed())
		host.turns++
		host.head, err = host.log.Head(ctx)
		Expect(err).NotTo(HaveOccurred())
		expectAllCurrent(ctx, kube, []*hostedSession{host})
		host.expectWholeTranscript(ctx)

		By("pi going on with the adopted branch: its request carries the branch's history")
		pi = e.Start()
		pi.Call(map[string]any{"type": "prompt", "message": "/turnlog-open " + env.namespace + "/" + branch})
		say(pi, "Three?", "3")
		pi.Quit()
		requests := prov.Requests()
		Expect(requestTexts(requests[len(requests)-1])).To(Equal([]string{"One?", "1", "Two, again?", "2b", "Three?"}))
		Eventually(func(g Gomega) {
			out, err := jsonpath("session", branch, "{.status.headSeq}")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).NotTo(Equal(fmt.Sprint(before[branch].headSeq)))
		}).Should(Succeed())
		currentTranscript(branch)

		By("forking an adopted Session with kubectl apply")
		applyFork(after, source, "13")
		Expect([]byte(turnlog("export", "--session", after))).To(Equal(sampleLines(sample, forkCutLines)))
		Expect(jsonpath("session", after, "{.spec.forkedFrom.uid}")).To(Equal(before[source].logUID))
		currentTranscript(after)
	})
})

// applyFork applies a SessionFork of source at atSeq with kubectl and
// waits until it has succeeded.
func applyFork(name, source, atSeq string) {
	GinkgoHelper()
	kubectlWithInput(fmt.Appendf(nil, `apiVersion: turnlog.dev/v1alpha1
kind: SessionFork
metadata: {name: %s}
spec:
  source: {name: %s}
  atSeq: %q
`, name, source, atSeq), "apply", "-f", "-")
	Eventually(jsonpath).WithArguments("sessionfork", name, `{.status.conditions[?(@.type=="Succeeded")].status}`).Should(Equal("True"))
}

// lostSession is what a user sees of a Session that must come back from
// the store as it was.
type lostSession struct {
	uid, logUID, forkedFrom string
	labels                  map[string]string
	headSeq                 int64
	transcript              []replay.Message
	// objects are the sha256 of each object under the Session's root but
	// its manifest, by key.
	objects map[string]string
}

// readLostSession waits until the Session is Current (replayed through
// its last turn/end, which is not its head when it is inside a turn) and
// reads it.
func readLostSession(ctx context.Context, name string) lostSession {
	GinkgoHelper()
	Eventually(jsonpath).WithArguments("session", name,
		`{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}`).
		Should(Equal("True "+turnlogv1.ReasonCurrent), "Session %s", name)
	var tr struct {
		Messages []replay.Message `json:"messages"`
	}
	out := turnlog("transcript", "--session", name)
	Expect(json.Unmarshal([]byte(out), &tr)).To(Succeed(), "turnlog transcript --session %s:\n%s", name, out)
	s := lostSession{transcript: tr.Messages}
	var obj struct {
		Metadata struct {
			UID    string            `json:"uid"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Storage struct {
				LogUID string `json:"logUID"`
			} `json:"storage"`
			ForkedFrom json.RawMessage `json:"forkedFrom"`
		} `json:"spec"`
		Status struct {
			HeadSeq int64 `json:"headSeq"`
		} `json:"status"`
	}
	Expect(json.Unmarshal([]byte(kubectl("get", "session", name, "-o", "json")), &obj)).To(Succeed())
	s.uid, s.labels, s.headSeq = obj.Metadata.UID, obj.Metadata.Labels, obj.Status.HeadSeq
	s.logUID = obj.Spec.Storage.LogUID
	if s.logUID == "" {
		s.logUID = s.uid
	}
	s.forkedFrom = string(obj.Spec.ForkedFrom)

	b, err := store.Open(ctx, env.storeURL, nil)
	Expect(err).NotTo(HaveOccurred())
	defer b.Close()
	root := filepath.Join(env.namespace, name, s.logUID) + "/"
	s.objects = map[string]string{}
	for o, err := range b.List(ctx, root) {
		Expect(err).NotTo(HaveOccurred())
		if o.Key == root+"session.json" {
			continue
		}
		data, err := b.Get(ctx, o.Key)
		Expect(err).NotTo(HaveOccurred())
		sum := sha256.Sum256(data)
		s.objects[o.Key] = hex.EncodeToString(sum[:])
	}
	Expect(s.objects).NotTo(BeEmpty(), "objects under %s", root)
	return s
}

// requestTexts are the texts of a provider request's messages, in order:
// what pi sent as the conversation so far.
func requestTexts(request map[string]any) []string {
	GinkgoHelper()
	data, err := json.Marshal(request["messages"])
	Expect(err).NotTo(HaveOccurred())
	var messages []struct {
		Content json.RawMessage `json:"content"`
	}
	Expect(json.Unmarshal(data, &messages)).To(Succeed())
	var texts []string
	for _, m := range messages {
		var text string
		if json.Unmarshal(m.Content, &text) == nil {
			texts = append(texts, text)
			continue
		}
		var blocks []struct {
			Type, Text string
		}
		Expect(json.Unmarshal(m.Content, &blocks)).To(Succeed(), "a message's content: %s", m.Content)
		for _, b := range blocks {
			if b.Type == "text" {
				texts = append(texts, b.Text)
			}
		}
	}
	return texts
}
