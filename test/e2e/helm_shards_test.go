package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/testutil/shardpolicy"
)

// chartShards are the shards the chart's `shards: 3` makes.
var chartShards = []string{"0", "1", "2"}

// reshardWithHelm moves the chart's release, one manager with Sessions,
// to three shards by docs/scaling.md's procedure ("From one manager to
// shards") while hosts go on appending to every Session: the manager
// scaled to 0 and its worker pods removed, `helm upgrade -f values.yaml
// --set shards=3`, the Sessions without a shard touched. Every Session,
// the busy ones and those that stayed quiet throughout, ends in the shard
// the policy gives it, Current there with every turn.
func reshardWithHelm(ctx SpecContext, h helmCLI, release, releaseNamespace, valuesFile string) {
	const namespace = "turnlog-system"
	expectManagerContainerRunning(namespace)
	kube := kubeClient()
	sessions := createUnshardedSessions(ctx, openHostStore(ctx), kube)
	// Two Sessions stay quiet: no nudge labels them, step 3 must.
	quiet := []*hostedSession{sessions[1], sessions[5]}
	busy := slices.DeleteFunc(slices.Clone(sessions), func(s *hostedSession) bool { return slices.Contains(quiet, s) })

	By("appending a turn to four of the Sessions every 2 s, from now until the end of the procedure")
	host := startHosts(ctx, busy, 2*time.Second)

	By("1. scaling the manager to 0, then removing its worker Deployments and Secrets, and waiting for their pods")
	kubectl("scale", "deployment/"+managerDeployment, "-n", namespace, "--replicas=0")
	expectNoManagerPods(namespace)
	unsharded := poolWorkerLabel + ",!" + turnlogv1.LabelShard
	kubectlAllNamespaces("delete", "deployments,secrets", "-l", unsharded)
	kubectlAllNamespaces("wait", "--for=delete", "pods", "-l", unsharded, "--timeout=2m")
	stopped, roundsStopped := time.Now(), host.rounds.Load()

	By("2. helm upgrade -f values.yaml --set shards=3: the policy, its ConfigMap and three managers, and no unsharded one")
	h.run("upgrade", release, h.chart, "-n", releaseNamespace, "-f", valuesFile, "--set", "shards=3")
	for _, shard := range chartShards {
		deployment := managerDeployment + "-shard-" + shard
		Eventually(func() (string, error) {
			return tryKubectl("rollout", "status", "deployment/"+deployment, "-n", namespace, "--timeout=10s")
		}).WithTimeout(3 * time.Minute).Should(ContainSubstring("successfully rolled out"))
		Expect(kubectl("get", "pods", "-n", namespace, "-l", turnlogv1.LabelShard+"="+shard, "-o", "jsonpath={.items[*].spec.containers[0].args}")).
			To(ContainSubstring(`"--shard=` + shard + `"`))
	}
	_, err := tryKubectl("get", "deployment", managerDeployment, "-n", namespace)
	Expect(err).To(MatchError(ContainSubstring("NotFound")))
	Expect(kubectl("get", "configmap", "turnlog-shards", "-n", namespace, "-o", "jsonpath={.data.shards}")).To(Equal(strings.Join(chartShards, " ")))

	By("3. giving the Sessions and SessionForks without a shard one, by touching them: the quiet Sessions have none yet")
	for _, s := range quiet {
		Expect(kubectl("get", "session", s.name, "-n", s.namespace, "-o", "jsonpath={.metadata.labels}")).NotTo(ContainSubstring(turnlogv1.LabelShard))
	}
	touched := kubectlAllNamespaces("annotate", "sessions,sessionforks", "-l", "!"+turnlogv1.LabelShard, "turnlog.dev/sharded=true")
	GinkgoWriter.Printf("step 3 touched %d objects the hosts' nudges had not labelled\n", strings.Count(touched, "annotated"))
	Expect(kubectlAllNamespaces("get", "sessions,sessionforks", "-l", "!"+turnlogv1.LabelShard, "-o", "name")).To(BeEmpty())
	roundsSharded := host.rounds.Load()
	host.waitRounds(roundsSharded + 2)
	Expect(host.finish()).To(Succeed())

	By("seeing every Session in the shard the policy gives it, Current there with every turn appended")
	for _, s := range sessions {
		Expect(kubectl("get", "session", s.name, "-n", s.namespace, "-o", `jsonpath={.metadata.labels.turnlog\.dev/shard}`)).
			To(Equal(shardpolicy.Shard(s.key(), chartShards)), s.key())
	}
	expectAllCurrent(ctx, kube, sessions)
	current := time.Now()
	for _, s := range sessions {
		s.expectWholeTranscript(ctx)
	}
	expectShardWorkers(busy)
	GinkgoWriter.Printf("1 → 3 shards: %d Sessions, %d quiet, %d with %d turns each (%d rounds appended from step 1 to step 3, %d after it); every Session Current with every turn %.1f s after step 1\n",
		len(sessions), len(quiet), len(busy), busy[0].turns, roundsSharded-roundsStopped, host.rounds.Load()-roundsSharded, current.Sub(stopped).Seconds())
}

// createUnshardedSessions creates two Sessions in each of three namespaces
// of the spec's own, named so that the chart's shards get two each, and
// appends a turn to each: the one manager makes them Current, and the
// release, without shards yet, labels none of them.
func createUnshardedSessions(ctx context.Context, st *agenthost.Store, kube client.Client) []*hostedSession {
	GinkgoHelper()
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	base := "turnlog-e2e-reshard-" + hex.EncodeToString(suffix)
	By("creating two Sessions in each of " + base + "-0 … -2 with agenthost, a turn each, reconciled by the one manager")
	var sessions []*hostedSession
	for i := range 3 {
		ns := fmt.Sprintf("%s-%d", base, i)
		createStoreCredentials(ctx, ns)
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				out, _ := tryKubectl("get", "sessions,deployments,pods", "-n", ns, "-o", "wide", "-L", turnlogv1.LabelShard)
				GinkgoWriter.Printf("\n--- kubectl get -n %s\n%s", ns, out)
			}
			_, _ = tryKubectl("delete", "namespace", ns, "--wait=false")
		})
		for j := range 2 {
			shard := chartShards[(2*i+j)%len(chartShards)]
			sessions = append(sessions, createHostedSession(ctx, st, kube, ns, nameInShard(ns, "chat", shard, chartShards)))
		}
	}
	appendTurns(ctx, sessions)
	expectAllCurrent(ctx, kube, sessions)
	for _, s := range sessions {
		Expect(kubectl("get", "session", s.name, "-n", s.namespace, "-o", "jsonpath={.metadata.labels}")).NotTo(ContainSubstring(turnlogv1.LabelShard))
	}
	return sessions
}

// expectShardWorkers: the worker Deployments in the busy Sessions'
// namespaces are the shards', turnlog-worker-SHARD, of those Sessions'
// shards (a quiet Session needs no worker run), and the one manager's are
// gone.
func expectShardWorkers(busy []*hostedSession) {
	GinkgoHelper()
	want := map[string][]string{}
	for _, s := range busy {
		name := poolWorkerName + "-" + shardpolicy.Shard(s.key(), chartShards)
		if !slices.Contains(want[s.namespace], name) {
			want[s.namespace] = append(want[s.namespace], name)
		}
	}
	for ns, names := range want {
		Expect(workerDeployments(ns)).To(WithTransform(strings.Fields, ConsistOf(names)), ns)
	}
}

// hosts appends a turn to every Session, round after round, until
// finished: agent hosts that never stop for the manager.
type hosts struct {
	rounds   atomic.Int64
	stop     chan struct{}
	done     chan error
	stopOnce sync.Once
}

// startHosts starts appending to sessions, a round every interval; the
// hosts are stopped when the spec ends, if not before.
func startHosts(ctx context.Context, sessions []*hostedSession, interval time.Duration) *hosts {
	h := &hosts{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		for {
			for _, s := range sessions {
				if err := s.appendTurn(ctx); err != nil {
					h.done <- err
					return
				}
			}
			h.rounds.Add(1)
			select {
			case <-h.stop:
				h.done <- nil
				return
			case <-time.After(interval):
			}
		}
	}()
	DeferCleanup(func() { _ = h.finish() })
	return h
}

// waitRounds waits until the hosts have appended n rounds in all.
func (h *hosts) waitRounds(n int64) {
	GinkgoHelper()
	Eventually(h.rounds.Load).Should(BeNumerically(">=", n))
}

// finish stops the hosts after the round they are in and returns what
// failed, if anything did; the Sessions are not touched after it returns.
func (h *hosts) finish() error {
	var err error
	h.stopOnce.Do(func() {
		close(h.stop)
		err = <-h.done
	})
	return err
}
