package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/testutil/shardpolicy"
	"github.com/turnlog/turnlog/test/internal/hostturn"
)

// kubeClient is a client of the local cluster that knows turnlog's kinds
// and can watch them, as an agent host's.
func kubeClient() client.WithWatch {
	GinkgoHelper()
	scheme := k8sruntime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(turnlogv1.AddToScheme(scheme)).To(Succeed())
	kube, err := client.NewWithWatch(env.cluster.RESTConfig, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return kube
}

// openHostStore opens the suite's store as an agent host does, with the
// keys worker pods get; it is closed when the spec ends.
func openHostStore(ctx context.Context) *agenthost.Store {
	GinkgoHelper()
	st, err := agenthost.OpenStore(ctx, env.storeURL, &agenthost.StoreOptions{
		AccessKeyID: env.storeCredentials["AWS_ACCESS_KEY_ID"], SecretAccessKey: env.storeCredentials["AWS_SECRET_ACCESS_KEY"],
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(st.Close)
	return st
}

// hostedSession is a Session an agent host keeps through agenthost: its
// log, the appender it streams turns with, and where the log ends.
type hostedSession struct {
	namespace, name string
	log             *agenthost.Log
	appender        *agenthost.Appender
	// turns appended, and the log's head after the last of them.
	turns int64
	head  agenthost.Head
}

func (s *hostedSession) key() string { return s.namespace + "/" + s.name }

// createHostedSession creates the Session namespace/name, with an empty
// log, as a host does.
func createHostedSession(ctx context.Context, st *agenthost.Store, kube client.Client, namespace, name string) *hostedSession {
	GinkgoHelper()
	log, err := st.CreateSession(ctx, kube, namespace, name, hostturn.Model)
	Expect(err).NotTo(HaveOccurred())
	return &hostedSession{namespace: namespace, name: name, log: log, appender: log.Appender(agenthost.AppenderOptions{})}
}

// openHostedSession opens the log of a Session something else wrote (a
// fork's child) to go on with it.
func openHostedSession(ctx context.Context, st *agenthost.Store, kube client.Client, namespace, name string) *hostedSession {
	GinkgoHelper()
	log, err := st.OpenSession(ctx, kube, namespace, name)
	Expect(err).NotTo(HaveOccurred())
	head, err := log.Head(ctx)
	Expect(err).NotTo(HaveOccurred())
	return &hostedSession{namespace: namespace, name: name, log: log, appender: log.Appender(agenthost.AppenderOptions{}),
		turns: head.Turns, head: head}
}

// appendTurn streams the next turn (test/internal/hostturn) as a host
// does: its last flush writes the turn/end and nudges the Session. It
// returns what failed rather than failing, for hosts in goroutines.
func (s *hostedSession) appendTurn(ctx context.Context) error {
	streamed, finish := hostturn.Events(s.turns + 1)
	if err := s.appender.Add(ctx, streamed...); err != nil {
		return fmt.Errorf("%s: turn %d: %w", s.key(), s.turns+1, err)
	}
	if err := s.appender.Add(ctx, finish...); err != nil {
		return fmt.Errorf("%s: turn %d: %w", s.key(), s.turns+1, err)
	}
	head, err := s.log.Head(ctx)
	if err != nil {
		return fmt.Errorf("%s: head: %w", s.key(), err)
	}
	s.turns, s.head = s.turns+1, head
	return nil
}

// appendTurns appends the next turn to each of sessions.
func appendTurns(ctx context.Context, sessions []*hostedSession) {
	GinkgoHelper()
	for _, s := range sessions {
		Expect(s.appendTurn(ctx)).To(Succeed())
	}
}

// expectCurrent: the Session is Ready and Current, its status holding the
// log's head and its transcript replayed through the last turn/end.
func (s *hostedSession) expectCurrent(ctx context.Context, g Gomega, kube client.Client) {
	session := &turnlogv1.Session{}
	g.Expect(kube.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: s.name}, session)).To(Succeed())
	ready := meta.FindStatusCondition(session.Status.Conditions, turnlogv1.ConditionReady)
	g.Expect(ready).NotTo(BeNil(), s.key())
	g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "%s: %s", s.key(), ready.Message)
	g.Expect(ready.Reason).To(Equal(turnlogv1.ReasonCurrent), "%s: %s", s.key(), ready.Message)
	g.Expect(session.Status.HeadSeq).To(HaveValue(Equal(s.head.Next-1)), s.key())
	g.Expect(session.Status.Replay).NotTo(BeNil(), s.key())
	g.Expect(session.Status.Replay.ThroughSeq).To(Equal(s.head.LastTurnEnd), s.key())
}

// expectAllCurrent waits until every one of sessions is Current through
// its log's head.
func expectAllCurrent(ctx context.Context, kube client.Client, sessions []*hostedSession) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		for _, s := range sessions {
			s.expectCurrent(ctx, g, kube)
		}
	}).Should(Succeed())
}

// expectWholeTranscript: the stored transcript holds a question and an
// answer for every turn appended, through the log's last turn/end.
func (s *hostedSession) expectWholeTranscript(ctx context.Context) {
	GinkgoHelper()
	Expect(s.head.Turns).To(Equal(s.turns), s.key())
	tr, err := s.log.Transcript(ctx)
	Expect(err).NotTo(HaveOccurred(), s.key())
	Expect(tr.ThroughSeq).To(Equal(s.head.LastTurnEnd), s.key())
	Expect(tr.Messages).To(HaveLen(2*int(s.turns)), s.key())
}

// nameInShard is the first of PREFIX-0, PREFIX-1, … that config/shards'
// admission policy (by: name) puts in shard among shards in namespace.
func nameInShard(namespace, prefix, shard string, shards []string) string {
	GinkgoHelper()
	for i := range 1000 {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if shardpolicy.Shard(namespace+"/"+name, shards) == shard {
			return name
		}
	}
	Fail(fmt.Sprintf("no name %s-N in %s hashes to shard %s of %v", prefix, namespace, shard, shards))
	return ""
}

// metricSample is one sample of the Prometheus text a manager serves.
type metricSample struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrapeMetrics reads a manager's metrics endpoint served over HTTP
// (--metrics-secure=false) at addr.
func scrapeMetrics(ctx context.Context, addr string) ([]metricSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	var out []metricSample
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for lines.Scan() {
		m := sampleLine.FindStringSubmatch(lines.Text())
		if m == nil {
			continue
		}
		value, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", lines.Text(), err)
		}
		s := metricSample{name: m[1], labels: map[string]string{}, value: value}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[p[1]] = p[2]
		}
		out = append(out, s)
	}
	return out, lines.Err()
}

// sumMetric sums the samples of name whose labels include match.
func sumMetric(samples []metricSample, name string, match map[string]string) float64 {
	var sum float64
	for _, s := range samples {
		if s.name == name && matchesLabels(s.labels, match) {
			sum += s.value
		}
	}
	return sum
}

// metricByLabel sums the samples of name by the value of label.
func metricByLabel(samples []metricSample, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range samples {
		if s.name == name {
			out[s.labels[label]] += s.value
		}
	}
	return out
}

func matchesLabels(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// headLog is every status.headSeq the Sessions a label selector picks
// showed, by namespace/name, with when a watch saw it.
type headLog struct {
	mu   sync.Mutex
	seen map[string][]headSeen
}

type headSeen struct {
	at   time.Time
	head int64
}

// watchHeads records the heads of the Sessions selector picks until ctx
// ends, from the moment it returns.
func watchHeads(ctx context.Context, kube client.WithWatch, selector string) *headLog {
	GinkgoHelper()
	list := &turnlogv1.SessionList{}
	Expect(kube.List(ctx, list, &client.ListOptions{Raw: &metav1.ListOptions{LabelSelector: selector}})).To(Succeed())
	l := &headLog{seen: map[string][]headSeen{}}
	for i := range list.Items {
		l.observe(&list.Items[i])
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return kube.Watch(ctx, &turnlogv1.SessionList{}, &client.ListOptions{Raw: &opts})
		},
	})
	Expect(err).NotTo(HaveOccurred())
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*turnlogv1.Session); ok {
				l.observe(s)
			}
		}
	}()
	return l
}

func (l *headLog) observe(s *turnlogv1.Session) {
	head := int64(-1)
	if s.Status.HeadSeq != nil {
		head = *s.Status.HeadSeq
	}
	key := s.Namespace + "/" + s.Name
	l.mu.Lock()
	defer l.mu.Unlock()
	if seen := l.seen[key]; len(seen) == 0 || seen[len(seen)-1].head != head {
		l.seen[key] = append(seen, headSeen{at: time.Now(), head: head})
	}
}

// firstAt is when the watch first saw the Session key with a head of at
// least head.
func (l *headLog) firstAt(key string, head int64) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.seen[key] {
		if s.head >= head {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// workerDeployments is the names of the worker Deployments in namespace,
// space-separated, as kubectl lists them.
func workerDeployments(namespace string) (string, error) {
	out, err := tryKubectl("get", "deployments", "-n", namespace, "-l", poolWorkerLabel, "-o", "jsonpath={.items[*].metadata.name}")
	return strings.TrimSpace(out), err
}
