package scale

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
	"github.com/turnlog/turnlog/test/e2e/e2ebuild"
	"github.com/turnlog/turnlog/test/internal/hostturn"
	"github.com/turnlog/turnlog/test/localcluster"
)

var (
	flagTurnsNode    = flag.String("turns.node", "", "the local cluster's node: process (pods as local processes, as `make dev`) or container (kubelet and containerd, as the e2e suite; root); empty: measure nothing")
	flagTurnsN       = flag.Int("turns.n", 10, "turns the host appends, one after another, each waited for")
	flagTurnsOut     = flag.String("turns.out", "", "append the result as a JSON line to this file")
	flagTurnsBuild   = flag.String("turns.build-dir", "", "where `make e2e-build` (hack/e2ebuild) put turnlog and, for the container node, the worker images; empty: build them here")
	flagTurnsTimeout = flag.Duration("turns.timeout", 5*time.Minute, "longest wait for one turn's transcript")
	flagTurnsSettle  = flag.Duration("turns.settle", 5*time.Second, "after the last turn, how long to keep counting Jobs and Pods created")
	flagTurnsArgs    = flag.String("turns.manager-args", "--poll-interval=30s", "extra flags for `turnlog manager`, space-separated (the default is make dev's)")
)

// Each worker mode measured works in its own namespace, turns-MODE, which
// holds the measured Session and its worker pods and nothing else, so every
// Job and Pod created in it is the Session's.

// TurnsResult is what one TestTurns run measured.
type TurnsResult struct {
	Date        string `json:"date"`
	CPUs        int    `json:"cpus"`
	Node        string `json:"node"`
	Workers     string `json:"workers"`
	ManagerArgs string `json:"managerArgs"`
	Turns       int    `json:"turns"`
	// Seconds from the Add that ends turn i+1 (its response/finish and
	// turn/end, one flush and a nudge) until WaitTranscript returns the
	// transcript through that turn/end.
	AppendToTranscriptSeconds []float64 `json:"appendToTranscriptSeconds"`
	MedianSeconds             float64   `json:"medianSeconds"`
	MaxSeconds                float64   `json:"maxSeconds"`
	// Jobs and Pods created in the Session's namespace while turn i+1 was
	// appended and waited for; the last also counts those created in the
	// settle after it.
	JobsPerTurnCreated []int `json:"jobsCreatedPerTurn"`
	PodsPerTurnCreated []int `json:"podsCreatedPerTurn"`
	Jobs               int   `json:"jobsCreated"`
	Pods               int   `json:"podsCreated"`
	// From the second turn on: the first turn also carries the log's
	// session/start, and a long-lived worker may start there.
	JobsAfterFirstTurn int     `json:"jobsCreatedAfterFirstTurn"`
	PodsAfterFirstTurn int     `json:"podsCreatedAfterFirstTurn"`
	ManagerPeakRSSMiB  float64 `json:"managerPeakRssMiB"`
	// WorkerPeakRSSMiB is the peak RSS of the worker pods' processes that
	// ran `turnlog worker serve` for this manager.
	WorkerPeakRSSMiB float64 `json:"workerPeakRssMiB,omitempty"`
}

// TestTurns measures what a stateless agent host waits for on every turn:
// it appends a turn to one Session through the public agenthost package and
// waits for the stored transcript through it (Log.WaitTranscript), -turns.n
// times, on a local cluster whose worker pods really run. A watch counts the
// Jobs and Pods the manager creates meanwhile. These are the figures of
// docs/benchmarks.md ("A turn's transcript in pod mode"); `make
// bench-turns` runs it. Without -turns.node it does nothing.
func TestTurns(t *testing.T) {
	if *flagTurnsNode == "" {
		t.Skip("no -turns.node: run `make bench-turns`")
	}
	if *flagTurnsN < 1 {
		t.Fatalf("-turns.n=%d: want at least one turn", *flagTurnsN)
	}
	// The cluster's own client logs go to its components' log files.
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	tl := startTurnsCluster(t, *flagTurnsNode)
	results := []TurnsResult{measureTurns(t, tl, controllersWorkerModePod)}
	for _, res := range results {
		t.Log("\n" + turnsTable(res))
	}
	if *flagTurnsOut != "" {
		f, err := os.OpenFile(*flagTurnsOut, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, res := range results {
			line, _ := json.Marshal(res)
			fmt.Fprintf(f, "%s\n", line)
		}
	}
}

// controllersWorkerModePod is the manager's pod worker mode
// (controllers.WorkerModePod): worker pods that stay while the namespace
// is busy.
const controllersWorkerModePod = "pod"

// measureTurns runs the host's turns against a manager in worker mode in
// a namespace of its own, and stops the manager.
func measureTurns(t *testing.T, tl *turnsCluster, mode string) TurnsResult {
	ctx := t.Context()
	namespace := "turns-" + mode
	tl.namespace(namespace)
	// Worker pods dial the manager on the host's address on the pod
	// network (the container node), or on the loopback (the process
	// node's pods are local processes).
	host := "127.0.0.1"
	if *flagTurnsNode == "container" {
		host = tl.cluster.NodeIP
	}
	addr := net.JoinHostPort(host, strconv.Itoa(freePort(t)))
	args := []string{"--worker-image=" + e2ebuild.WorkerImage, "--worker-mode=" + mode, "--worker-listen=" + addr, "--worker-endpoint=https://" + addr}
	args = append(args, strings.Fields(*flagTurnsArgs)...)
	if tl.credentialsSecret != "" {
		args = append(args, "--worker-credentials-secret="+tl.credentialsSecret)
	}
	m := tl.startManager(mode, args)

	created := watchCreated(t, tl.clientset, namespace)

	st, err := agenthost.OpenStore(ctx, tl.storeURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log, err := st.CreateSession(ctx, tl.kube, namespace, "chat", hostturn.Model)
	if err != nil {
		t.Fatal(err)
	}
	a := log.Appender(agenthost.AppenderOptions{})
	res := TurnsResult{
		Date: time.Now().UTC().Format(time.DateOnly), CPUs: runtime.NumCPU(),
		Node: *flagTurnsNode, Workers: mode, ManagerArgs: strings.Join(args, " "), Turns: *flagTurnsN,
	}
	for i := range *flagTurnsN {
		turn := int64(i + 1)
		created.setTurn(i)
		streamed, finish := hostturn.Events(turn)
		if err := a.Add(ctx, streamed...); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		err := a.Add(ctx, finish...)
		if err != nil {
			t.Fatal(err)
		}
		head, err := log.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waitCtx, cancel := context.WithTimeout(ctx, *flagTurnsTimeout)
		tr, err := log.WaitTranscript(waitCtx, head.LastTurnEnd)
		cancel()
		if err != nil {
			t.Fatalf("turn %d: no transcript through seq %d within %s: %v", turn, head.LastTurnEnd, *flagTurnsTimeout, err)
		}
		took := time.Since(began).Seconds()
		// A question and an answer per turn: anything else would mean the
		// wait returned another transcript than this turn's.
		if want := 2 * int(turn); len(tr.Messages) != want {
			t.Fatalf("turn %d: transcript of %d messages, want %d", turn, len(tr.Messages), want)
		}
		res.AppendToTranscriptSeconds = append(res.AppendToTranscriptSeconds, took)
		t.Logf("turn %d: transcript through seq %d after %.2fs", turn, tr.ThroughSeq, took)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Work the manager does after the transcript (status, a last run) is
	// still the turn's: wait until status says the Session is Current
	// through its head, and a little longer, before counting.
	tl.waitCurrentThroughHead(namespace, log)
	time.Sleep(*flagTurnsSettle)
	res.JobsPerTurnCreated, res.PodsPerTurnCreated = created.perTurn(*flagTurnsN)
	for i := range *flagTurnsN {
		res.Jobs += res.JobsPerTurnCreated[i]
		res.Pods += res.PodsPerTurnCreated[i]
		if i > 0 {
			res.JobsAfterFirstTurn += res.JobsPerTurnCreated[i]
			res.PodsAfterFirstTurn += res.PodsPerTurnCreated[i]
		}
	}
	sorted := slices.Sorted(slices.Values(res.AppendToTranscriptSeconds))
	res.MedianSeconds = median(sorted)
	res.MaxSeconds = sorted[len(sorted)-1]
	_, res.ManagerPeakRSSMiB = m.rss()
	res.WorkerPeakRSSMiB = workerPeakRSS(t, args)
	m.stop()
	line, _ := json.Marshal(res)
	t.Logf("result: %s", line)
	return res
}

// workerPeakRSS is the largest peak RSS of the processes on this machine
// running `turnlog worker serve` against the endpoint in the manager's
// args: the pool's pods, whether local processes (process node) or
// containers (the container node's runc processes are this machine's).
func workerPeakRSS(t *testing.T, managerArgs []string) float64 {
	var endpoint string
	for _, a := range managerArgs {
		if v, ok := strings.CutPrefix(a, "--worker-endpoint="); ok {
			endpoint = v
		}
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var peak float64
	for _, dir := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), "worker\x00serve\x00--endpoint="+endpoint+"\x00") {
			continue
		}
		status, err := os.ReadFile(filepath.Join(dir, "status"))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(status)) {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				peak = max(peak, kb/1024)
			}
		}
	}
	if peak == 0 {
		t.Logf("no worker serve process for %s found on this machine", endpoint)
	}
	return peak
}

// median of sorted values; the mean of the middle two for an even count.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// turnsTable prints each turn's wait and what it created, then the
// summary.
func turnsTable(res TurnsResult) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "turn\tappend -> transcript\tJobs created\tPods created\t\n")
	for i, s := range res.AppendToTranscriptSeconds {
		fmt.Fprintf(w, "%d\t%.2f s\t%d\t%d\t\n", i+1, s, res.JobsPerTurnCreated[i], res.PodsPerTurnCreated[i])
	}
	w.Flush()
	fmt.Fprintf(&b, "node %s, workers %s, %d turns on %d CPUs: append -> transcript median %.2f s, max %.2f s; "+
		"%d Jobs and %d Pods created (%.1f and %.1f per turn; %d and %d from the second turn on); manager peak RSS %.0f MiB, worker peak RSS %.0f MiB\n",
		res.Node, res.Workers, res.Turns, res.CPUs, res.MedianSeconds, res.MaxSeconds,
		res.Jobs, res.Pods, float64(res.Jobs)/float64(res.Turns), float64(res.Pods)/float64(res.Turns),
		res.JobsAfterFirstTurn, res.PodsAfterFirstTurn, res.ManagerPeakRSSMiB, res.WorkerPeakRSSMiB)
	return b.String()
}

// turnsCluster is a local cluster, the store its workers reach and what
// the harness talks to it with.
type turnsCluster struct {
	t         *testing.T
	cluster   *localcluster.Cluster
	kube      client.Client
	clientset kubernetes.Interface
	turnlog   string
	// plugin is kubectl-turnlog, built for the forks' diff.
	plugin   string
	storeURL string
	// credentialsSecret names the Secret in each run's namespace worker pods
	// read the store's keys from; empty when the store needs none.
	credentialsSecret string
	credentials       map[string]string
	dir               string
}

// namespace creates the namespace a run works in, with the store's keys
// for its worker pods.
func (tl *turnsCluster) namespace(name string) {
	tl.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if tl.credentialsSecret != "" {
		tl.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tl.credentialsSecret, Namespace: name}, StringData: tl.credentials})
	}
}

// freePort is a TCP port free on this machine now.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startTurnsCluster starts the local cluster as `make dev` does (process
// node, file:// store) or as the e2e suite does (container node, versitygw
// on the pod network, its keys in a Secret), with the namespace the run
// works in.
func startTurnsCluster(t *testing.T, node string) *turnsCluster {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tl := &turnsCluster{t: t, dir: t.TempDir()}
	opts := localcluster.Options{
		CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")},
		ManifestPaths:     []string{filepath.Join(root, "config", "admission", "forkedfrom_policy.yaml")},
	}
	var withImages bool
	switch node {
	case "process":
	case "container":
		if os.Geteuid() != 0 {
			t.Fatal("-turns.node=container runs the local cluster's container node, which needs root (see docs/local-cluster.md)")
		}
		withImages = true
	default:
		t.Fatalf("-turns.node=%q: want process or container", node)
	}

	// What `make bench-turns` built before the test (outside its timeout),
	// else built here.
	var built e2ebuild.Artifacts
	if *flagTurnsBuild != "" {
		built, err = e2ebuild.Check(*flagTurnsBuild, withImages)
	} else {
		built, err = e2ebuild.Build(t.Context(), root, filepath.Join(tl.dir, "build"), withImages)
	}
	if err != nil {
		t.Fatal(err)
	}
	tl.turnlog = built.Turnlog
	if withImages {
		opts.Node = localcluster.ContainerNode
		opts.ImageArchives = built.ImageArchives[:1] // e2ebuild.WorkerImage alone
	} else {
		opts.Images = map[string]string{e2ebuild.WorkerImage: built.Turnlog}
	}

	startCtx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	tl.cluster, err = localcluster.Start(startCtx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tl.cluster.Stop(); err != nil {
			t.Error(err)
		}
	})
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = turnlogv1.AddToScheme(scheme)
	if tl.kube, err = client.New(tl.cluster.RESTConfig, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if tl.clientset, err = kubernetes.NewForConfig(tl.cluster.RESTConfig); err != nil {
		t.Fatal(err)
	}

	if withImages {
		gw := versitygw.StartOn(t, tl.cluster.NodeIP)
		tl.storeURL = gw.URL
		// The manager and the host read the keys from the environment,
		// worker pods from the Secret, as a deployed manager gives them.
		t.Setenv("AWS_ACCESS_KEY_ID", gw.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", gw.SecretKey)
		tl.credentialsSecret = "turnlog-store-credentials"
		tl.credentials = map[string]string{"AWS_ACCESS_KEY_ID": gw.AccessKey, "AWS_SECRET_ACCESS_KEY": gw.SecretKey}
	} else {
		storeDir := filepath.Join(tl.dir, "store")
		if err := os.MkdirAll(storeDir, 0o755); err != nil {
			t.Fatal(err)
		}
		tl.storeURL = "file://" + storeDir
	}
	return tl
}

func (tl *turnsCluster) create(obj client.Object) {
	tl.t.Helper()
	if err := tl.kube.Create(tl.t.Context(), obj); err != nil {
		tl.t.Fatal(err)
	}
}

// startManager runs the built `turnlog manager` against the cluster and
// store with args, its log in the test's directory (printed if the test
// fails).
func (tl *turnsCluster) startManager(name string, args []string) *managerProc {
	t := tl.t
	t.Helper()
	logPath := filepath.Join(tl.dir, "manager-"+name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tl.turnlog, append([]string{"manager", "--store-url=" + tl.storeURL,
		"--metrics-bind-address=0", "--health-probe-bind-address=0"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+tl.cluster.Kubeconfig)
	cmd.Stdout, cmd.Stderr = out, out
	// Should the test binary be killed, the kernel ends the manager too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &managerProc{t: t, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(m.done)
	}()
	t.Cleanup(func() {
		m.stop()
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			lines := strings.Split(string(data), "\n")
			t.Logf("manager log (last 100 lines):\n%s", strings.Join(lines[max(0, len(lines)-100):], "\n"))
		}
	})
	return m
}

// waitCurrentThroughHead waits until the Session's status is Ready,
// Current and replayed through the log's head.
func (tl *turnsCluster) waitCurrentThroughHead(namespace string, log *agenthost.Log) {
	t := tl.t
	t.Helper()
	head, err := log.Head(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: namespace, Name: log.Location().Session}
	deadline := time.Now().Add(*flagTurnsTimeout)
	for {
		s := &turnlogv1.Session{}
		if err := tl.kube.Get(t.Context(), key, s); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady)
		if c != nil && c.Status == metav1.ConditionTrue && c.Reason == turnlogv1.ReasonCurrent &&
			s.Status.Replay != nil && s.Status.Replay.ThroughSeq >= head.LastTurnEnd {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Session %s not Current through seq %d after %s", key, head.LastTurnEnd, *flagTurnsTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createdCounter counts the Jobs and Pods created in a namespace, by UID,
// each against the turn being measured when the watch saw it. Finished
// worker Jobs and their pods are deleted soon after, so a list before and
// after would miss them; a watch sees every one.
type createdCounter struct {
	mu   sync.Mutex
	turn int
	jobs map[types.UID]int
	pods map[types.UID]int
}

// watchCreated starts informers on ns's Jobs and Pods; the namespace must
// be empty of both, so that everything they add is new.
func watchCreated(t *testing.T, cs kubernetes.Interface, ns string) *createdCounter {
	c := &createdCounter{jobs: map[types.UID]int{}, pods: map[types.UID]int{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	count := func(seen map[types.UID]int) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
			o, err := meta.Accessor(obj)
			if err != nil {
				return
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if _, ok := seen[o.GetUID()]; !ok {
				seen[o.GetUID()] = c.turn
			}
		}}
	}
	jobs := factory.Batch().V1().Jobs().Informer()
	pods := factory.Core().V1().Pods().Informer()
	if _, err := jobs.AddEventHandler(count(c.jobs)); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.AddEventHandler(count(c.pods)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory.Start(stop)
	for typ, ok := range factory.WaitForCacheSync(stop) {
		if !ok {
			t.Fatalf("watching %v in %s: cache not synced", typ, ns)
		}
	}
	// The informers' first list must be empty: anything in it predates
	// the run.
	if n := len(jobs.GetStore().List()) + len(pods.GetStore().List()); n != 0 {
		t.Fatalf("namespace %s already has %d Jobs and Pods", ns, n)
	}
	return c
}

// setTurn attributes what is created from now on to turn i (from 0).
func (c *createdCounter) setTurn(i int) {
	c.mu.Lock()
	c.turn = i
	c.mu.Unlock()
}

// perTurn is how many Jobs and Pods each of n turns created.
func (c *createdCounter) perTurn(n int) (jobs, pods []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	jobs, pods = make([]int, n), make([]int, n)
	for _, i := range c.jobs {
		jobs[i]++
	}
	for _, i := range c.pods {
		pods[i]++
	}
	return jobs, pods
}
