package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
	"github.com/turnlog/turnlog/test/e2e/e2ebuild"
	"github.com/turnlog/turnlog/test/localcluster"
)

var (
	flagDuration   = flag.Duration("soak.duration", 0, "how long hosts stream and faults are injected; 0 skips the test")
	flagSessions   = flag.Int("soak.sessions", 8, "Sessions the hosts stream into")
	flagHosts      = flag.Int("soak.hosts", 2, "host processes, each streaming into its share of the Sessions (a third of them, at least one, into the second store's)")
	flagFaultEvery = flag.Duration("soak.fault-every", 20*time.Second, "mean time between faults")
	flagForkEvery  = flag.Duration("soak.fork-every", 5*time.Second, "time between SessionForks of the soak's Sessions")
	flagCheckEvery = flag.Duration("soak.check-every", 3*time.Minute, "time between checks while the soak runs")
	flagSettle     = flag.Duration("soak.settle", 3*time.Minute, "how long the backlog after the last fault may go without an object settling")
	flagFloodForks = flag.Int("soak.flood-forks", 30, "SessionForks of the flooding namespace's large log")
	flagFloodTurns = flag.Int("soak.flood-turns", 2000, "turns of the flooding namespace's large log")
	flagProbes     = flag.Int("soak.probes", 8, "appends of the quiet namespace measured with and without the flood")
	flagOut        = flag.String("soak.out", "", "directory for the run's records (faults, RSS, summary); default a temporary one")
)

const (
	image      = e2ebuild.WorkerImage
	ns         = "soak"
	quietNS    = "soak-quiet"
	floodNS    = "soak-flood"
	credSecret = "turnlog-store-credentials"
	// secondStore is the manager's second store, which every third
	// Session of ns names (spec.storage.store) and the fault
	// second-store-down takes away for minutes.
	secondStore = "second"
)

// run is what the soak's parts share.
type run struct {
	t         *testing.T
	ctx       context.Context
	root      string
	dir       string // records
	turnlog   string
	cluster   *localcluster.Cluster
	c         client.Client
	gw        *versitygw.Server
	proxy     *proxy
	storeURL  string // through the proxy: what the manager, workers and hosts use
	directURL string // the gateway itself: what the checker reads through
	manager   *process
	hosts     []*hostProc
	faults    *faultLog
	began     time.Time
	// hostsStopped is when the load ended: the backlog after it drains
	// and says nothing of growth under load.
	hostsStopped time.Time
	// faulting is held while a fault is injected: the checks during the
	// run read through the API server and the store, and wait for both
	// (exportBetweenFaults).
	faulting sync.Mutex

	mu    sync.Mutex
	forks []string // SessionFork names in ns

	// gw2 is the second store, secondStore on the manager: a versitygw
	// of its own with the first one's keys, which the manager, the worker
	// pods, the hosts and the checker all reach directly at secondURL.
	gw2       *versitygw.Server
	secondURL string
	// secondSessions are the Sessions of ns created on the second store.
	secondSessions []string
	// storeOf caches the direct URL of each Session's store, by
	// "namespace/name" (spec.storage is immutable).
	storeOf sync.Map
}

func TestSoak(t *testing.T) {
	if *flagDuration == 0 {
		t.Skip("no -soak.duration: run `make soak` or `make test-soak`")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the soak runs the local cluster's container node, which needs root (see docs/local-cluster.md)")
	}
	// The cluster's own client logs go to its components' log files.
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	r := setUp(t)
	r.began = time.Now()
	r.faults = newFaultLog(t, r.dir, r.began)
	t.Logf("soak: %d Sessions (%s on store %q), %d hosts, %s of load and faults; records in %s",
		*flagSessions, strings.Join(r.secondSessions, ", "), secondStore, len(r.hosts), *flagDuration, r.dir)

	rss := r.sampleRSS()
	stopLoad := r.startLoad()
	// The noisy neighbour first, with the hosts streaming and no fault
	// yet: the quiet namespace's append -> status latency without, then
	// with, a flood from another namespace.
	nn := r.noisyNeighbour()

	checks := r.periodicChecks()
	// A Session of the default store takes a turn at a time all through
	// the faults: its append -> Current during the second store's outage,
	// against outside faults, is what the breaker per store is for.
	probe := r.probeDefaultStore()
	<-r.injectFaults(*flagDuration)
	lastFault := r.faults.last()
	outage := r.secondStoreFigures(probe())
	stopLoad()
	r.stopHosts()
	hostsStopped := time.Now()
	r.hostsStopped = hostsStopped
	outage.HostFlushWaits = r.hostFlushWaits()
	for _, store := range []string{turnlogv1.DefaultStore, secondStore} {
		w := outage.HostFlushWaits[store]
		t.Logf("hosts on store %q: %d flushes retried while the store failed, the longest waiting %.1fs", store, w.Retried, w.LongestSeconds)
	}
	checks()
	settle := r.waitSettled(lastFault)
	res := r.check()
	res.Duration = *flagDuration
	res.Sessions = *flagSessions
	res.Hosts = len(r.hosts)
	res.Faults = r.faults.counts()
	res.SettleSeconds = settle.Seconds()
	res.SettleAfterHostsSeconds = (settle - hostsStopped.Sub(lastFault)).Seconds()
	res.NoisyNeighbour = nn
	res.SecondStore = outage
	res.RSS = rss()
	// How many turns the killed hosts were in the middle of, and the
	// Sessions whose stream a host gave up on: an appender error it could
	// not retry past, which a user's host would report too.
	for _, h := range r.hosts {
		data, _ := os.ReadFile(h.logPath)
		for line := range strings.Lines(string(data)) {
			switch {
			case strings.Contains(line, "was left open"):
				res.TurnsLeftOpen++
			case strings.HasPrefix(line, "host: "):
				res.HostStreamErrors++
				t.Errorf("%s: %s", h.name, strings.TrimSpace(line))
			}
		}
	}
	r.report(res)
}

// setUp builds turnlog, the host and the worker image, and starts the
// cluster with a container node, versitygw behind the fault proxy, a second
// versitygw (the manager's store "second"), the manager in pod worker mode,
// and the namespaces with their Sessions.
func setUp(t *testing.T) *run {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	r := &run{t: t, ctx: t.Context(), root: root, dir: *flagOut}
	if r.dir == "" {
		r.dir = filepath.Join(tmp, "out")
	}
	// A previous run's records would be read as this run's.
	_ = os.RemoveAll(filepath.Join(r.dir, "acks"))
	for _, old := range []string{"manager.log", "summary.json", "rss.tsv", "faults.tsv"} {
		_ = os.Remove(filepath.Join(r.dir, old))
	}
	if olds, _ := filepath.Glob(filepath.Join(r.dir, "host-*.log")); olds != nil {
		for _, old := range olds {
			_ = os.Remove(old)
		}
	}
	if err := os.MkdirAll(filepath.Join(r.dir, "acks"), 0o755); err != nil {
		t.Fatal(err)
	}

	// turnlog and its image: what `make e2e-build` built (E2E_BUILD_DIR),
	// else built here.
	var built e2ebuild.Artifacts
	if dir := os.Getenv("E2E_BUILD_DIR"); dir != "" {
		built, err = e2ebuild.Check(dir, true)
	} else {
		built, err = e2ebuild.Build(r.ctx, root, filepath.Join(tmp, "build"), true)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.turnlog = built.Turnlog
	r.goCmd("build", "-o", filepath.Join(tmp, "host"), "./test/soak/host")
	archive := built.ImageArchives[0] // e2ebuild.WorkerImage

	startCtx, cancel := context.WithTimeout(r.ctx, 5*time.Minute)
	defer cancel()
	r.cluster, err = localcluster.Start(startCtx, localcluster.Options{
		CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")},
		ManifestPaths:     []string{filepath.Join(root, "config", "admission", "forkedfrom_policy.yaml")},
		Node:              localcluster.ContainerNode,
		ImageArchives:     []string{archive},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.cluster.Stop(); err != nil {
			t.Error(err)
		}
	})
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = turnlogv1.AddToScheme(scheme)
	if r.c, err = client.New(r.cluster.RESTConfig, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}

	r.gw = versitygw.StartOn(t, r.cluster.NodeIP)
	r.proxy = startProxy(t, r.cluster.NodeIP, r.gw.Addr())
	r.storeURL = r.gw.URLVia(r.proxy.addr())
	r.directURL = r.gw.URLVia(r.gw.Addr())
	// The second store has the first one's keys: the manager, the hosts
	// and the worker pods (one Secret per namespace) have one set of
	// credentials for every store. Its server is started again with them;
	// root owns every bucket, the one it created with its own keys too.
	r.gw2 = versitygw.StartOn(t, r.cluster.NodeIP)
	r.gw2.Kill()
	r.gw2.AccessKey, r.gw2.SecretKey = r.gw.AccessKey, r.gw.SecretKey
	if err := r.gw2.Restart(); err != nil {
		t.Fatalf("versitygw of the second store, with the first one's keys: %v", err)
	}
	r.secondURL = r.gw2.URLVia(r.gw2.Addr())
	// turnlog's CLI, the manager and the hosts read the keys from here.
	t.Setenv("AWS_ACCESS_KEY_ID", r.gw.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", r.gw.SecretKey)

	for _, n := range []string{ns, quietNS, floodNS} {
		r.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
		r.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: credSecret, Namespace: n},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": r.gw.AccessKey, "AWS_SECRET_ACCESS_KEY": r.gw.SecretKey}})
	}
	// Worker pods dial the manager on the host's address on the pod
	// network, at the same port after each restart.
	workerAddr := net.JoinHostPort(r.cluster.NodeIP, strconv.Itoa(freePort(t, r.cluster.NodeIP)))
	r.manager = &process{name: "manager", logPath: filepath.Join(r.dir, "manager.log"), args: []string{r.turnlog, "manager",
		"--store-url=" + r.storeURL,
		"--store=" + secondStore + "=" + r.secondURL,
		"--worker-mode=pod",
		"--worker-listen=" + workerAddr,
		"--worker-endpoint=https://" + workerAddr,
		"--worker-image=" + image,
		"--worker-credentials-secret=" + credSecret,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--poll-interval=10s",
		"--max-poll-interval=" + maxPoll.String(),
	}, env: []string{"KUBECONFIG=" + r.cluster.Kubeconfig}}
	if err := r.manager.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.manager.stop)

	// Every third Session is on the second store, and a third of the
	// hosts (at least one) write those: a host is given one store URL,
	// as a user's host is given the URL of the store its Sessions name.
	secondHosts := max(1, *flagHosts/3)
	firstHosts := max(1, *flagHosts-secondHosts)
	first, second := make([][]string, firstHosts), make([][]string, secondHosts)
	for i := range *flagSessions {
		name := fmt.Sprintf("chat-%03d", i)
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if onSecondStore(i) {
			s.Spec.Storage.Store = secondStore
			k := len(r.secondSessions)
			second[k%secondHosts] = append(second[k%secondHosts], name)
			r.secondSessions = append(r.secondSessions, name)
		} else {
			k := i - len(r.secondSessions)
			first[k%firstHosts] = append(first[k%firstHosts], name)
		}
		r.create(s)
	}
	for _, group := range []struct {
		store    string
		sessions [][]string
	}{{r.storeURL, first}, {r.secondURL, second}} {
		for _, ss := range group.sessions {
			if len(ss) == 0 {
				continue
			}
			i := len(r.hosts)
			h := &hostProc{store: secondStore, process: process{name: fmt.Sprintf("host-%d", i), logPath: filepath.Join(r.dir, fmt.Sprintf("host-%d.log", i)),
				args: []string{filepath.Join(tmp, "host"), "--kubeconfig", r.cluster.Kubeconfig, "--store-url", group.store,
					"--namespace", ns, "--sessions", strings.Join(ss, ","), "--ack-dir", filepath.Join(r.dir, "acks")}}}
			if group.store == r.storeURL {
				h.store = turnlogv1.DefaultStore
			}
			if err := h.start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(h.stop)
			r.hosts = append(r.hosts, h)
		}
	}
	return r
}

// onSecondStore says whether the soak's Session chat-<i> is on the second
// store: every third, and with fewer than three Sessions the last one.
func onSecondStore(i int) bool {
	return i%3 == 2 || (*flagSessions < 3 && i == *flagSessions-1)
}

func (r *run) goCmd(args ...string) {
	cmd := exec.CommandContext(r.ctx, "go", args...)
	cmd.Dir = r.root
	if out, err := cmd.CombinedOutput(); err != nil {
		r.t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (r *run) create(obj client.Object) {
	if err := r.c.Create(r.ctx, obj); err != nil {
		r.t.Fatal(err)
	}
}

// kubectl runs the cluster's real kubectl.
func (r *run) kubectl(args ...string) (string, error) {
	out, err := r.cluster.Kubectl(r.ctx, args...).CombinedOutput()
	return string(out), err
}

// turnlogCmd runs the built CLI against the direct store and returns its
// stdout.
func (r *run) turnlogCmd(stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(r.ctx, r.turnlog, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+r.cluster.Kubeconfig)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("turnlog %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// process is a child process the soak kills and starts again.
type process struct {
	name, logPath string
	args, env     []string
	mu            sync.Mutex
	cmd           *exec.Cmd
	done          chan struct{}
}

func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s start\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// kill SIGKILLs the process: no chance to clean up.
func (p *process) kill() {
	p.signal(syscall.SIGKILL, 0)
}

// stop asks the process to stop (SIGTERM) and kills it after a while.
func (p *process) stop() {
	p.signal(syscall.SIGTERM, time.Minute)
}

func (p *process) signal(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// exitedOnItsOwn reports a process that ended without being stopped.
func (p *process) exitedOnItsOwn() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// hostProc is a host process; store is the name of the store its
// Sessions are on.
type hostProc struct {
	process
	store string
}

// startLoad starts the forks and nudges of the soak's Sessions; what it
// returns stops them.
func (r *run) startLoad() (stop func()) {
	ctx, cancel := context.WithCancel(r.ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(*flagForkEvery):
			}
			r.forkAtRandom(rng, i)
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(3 * time.Second):
			}
			var list turnlogv1.SessionList
			if err := r.c.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) == 0 {
				continue
			}
			s := list.Items[rand.IntN(len(list.Items))]
			nudge(ctx, r.c, &s)
		}
	})
	return func() { cancel(); wg.Wait() }
}

// forkAtRandom forks one of the soak's Sessions at a random seq up to its
// head, a fraction ("41.5", floored to 41) half the time, with the real
// kubectl as a user would.
func (r *run) forkAtRandom(rng *rand.Rand, i int) {
	src := fmt.Sprintf("chat-%03d", rng.IntN(*flagSessions))
	var s turnlogv1.Session
	if err := r.c.Get(r.ctx, client.ObjectKey{Namespace: ns, Name: src}, &s); err != nil || s.Status.HeadSeq == nil || *s.Status.HeadSeq < 1 {
		return
	}
	at := fmt.Sprint(rng.Int64N(*s.Status.HeadSeq + 1))
	if rng.IntN(2) == 0 {
		at += fmt.Sprintf(".%d", 1+rng.IntN(9))
	}
	name := fmt.Sprintf("fork-%04d", i)
	manifest := fmt.Sprintf("apiVersion: turnlog.dev/v1alpha1\nkind: SessionFork\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  source:\n    name: %s\n  atSeq: %q\n", name, ns, src, at)
	cmd := r.cluster.Kubectl(r.ctx, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	// The API server may be slow under a fault; a fork not created is not
	// a fork to check.
	if out, err := cmd.CombinedOutput(); err != nil {
		r.t.Logf("kubectl apply of %s: %v: %s", name, err, out)
		return
	}
	r.mu.Lock()
	r.forks = append(r.forks, name)
	r.mu.Unlock()
}

func nudge(ctx context.Context, c client.Client, s *turnlogv1.Session) {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, turnlogv1.AnnotationRequestedAt, time.Now().UTC().Format(time.RFC3339Nano))
	_ = c.Patch(ctx, s, client.RawPatch("application/merge-patch+json", []byte(patch)))
}

// stopHosts stops every host after its current turns; a host that had
// failed on its own fails the soak.
func (r *run) stopHosts() {
	for _, h := range r.hosts {
		if h.exitedOnItsOwn() {
			r.t.Errorf("%s exited on its own; see %s", h.name, h.logPath)
		}
		h.stop()
	}
}

// periodicChecks checks acknowledged events and validation every
// -soak.check-every while the soak runs; what it returns ends them.
func (r *run) periodicChecks() (stop func()) {
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(*flagCheckEvery):
			}
			lost, dup, invalid := r.checkAcks(false)
			r.t.Logf("check at %s: acknowledged events lost %d, duplicated %d; logs not valid %d",
				time.Since(r.began).Round(time.Second), lost, dup, invalid)
		}
	}()
	return func() { cancel(); <-done }
}

// sampleRSS records the manager's resident memory every 5 s (whichever
// manager process is running), and the backlog then, and returns what
// stops it and yields the samples.
func (r *run) sampleRSS() (stop func() []rssSample) {
	ctx, cancel := context.WithCancel(r.ctx)
	var samples []rssSample
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if pid := r.manager.pid(); pid != 0 {
				if kib := vmRSS(pid); kib > 0 {
					samples = append(samples, rssSample{Seconds: time.Since(r.began).Seconds(), MiB: float64(kib) / 1024, PID: pid,
						Backlog: r.backlog()})
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
	return func() []rssSample { cancel(); <-done; return samples }
}

type rssSample struct {
	Seconds float64 `json:"seconds"`
	MiB     float64 `json:"mib"`
	PID     int     `json:"pid"`
	// Backlog is the Sessions of the streaming namespace not Current
	// (waiting for their worker runs), -1 if they could not be listed.
	Backlog int `json:"backlog"`
}

// backlog is how many of the streaming namespace's Sessions are not
// Current: the work the worker pods have yet to catch up with.
func (r *run) backlog() int {
	var sessions turnlogv1.SessionList
	if err := r.c.List(r.ctx, &sessions, client.InNamespace(ns)); err != nil {
		return -1
	}
	n := 0
	for _, s := range sessions.Items {
		if c := apimeta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady); c == nil || c.Reason != turnlogv1.ReasonCurrent {
			n++
		}
	}
	return n
}

// freePort is a TCP port free on host now.
func freePort(t *testing.T, host string) int {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func vmRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			var kib int64
			fmt.Sscan(f[1], &kib)
			return kib
		}
	}
	return 0
}

// result is the run's summary, as docs/reliability.md reports it.
type result struct {
	Duration     time.Duration  `json:"-"`
	DurationS    string         `json:"duration"`
	Sessions     int            `json:"sessions"`
	Hosts        int            `json:"hosts"`
	Events       int64          `json:"acknowledgedEvents"`
	EventsPerSec float64        `json:"eventsPerSecond"`
	Faults       map[string]int `json:"faults"`
	// TurnsLeftOpen: turns a killed host was streaming, ended as aborted
	// by the host started in its place.
	TurnsLeftOpen int `json:"turnsLeftOpenByKilledHosts"`
	// HostStreamErrors: Sessions whose stream a host ended on an error.
	HostStreamErrors int      `json:"hostStreamErrors"`
	Lost             int      `json:"lost"`
	Duplicated       int      `json:"duplicated"`
	Invalid          int      `json:"invalidLogs"`
	Mismatches       []string `json:"transcriptMismatches"`
	// CaughtUpByPoll are the Sessions whose status was behind their log
	// once everything settled, which the check left to their poll.
	CaughtUpByPoll []string `json:"caughtUpByPoll,omitempty"`
	Forks          int      `json:"forks"`
	ForkAnomalies  int      `json:"forkAnomalies"`
	SettleSeconds  float64  `json:"settleSeconds"`
	// SettleAfterHostsSeconds: the hosts stream until the run's end,
	// after the last fault; this is from when they stopped.
	SettleAfterHostsSeconds float64        `json:"settleAfterHostsStoppedSeconds"`
	EventReasons            map[string]int `json:"eventReasons"`
	NoisyNeighbour          *neighbour     `json:"noisyNeighbour"`
	RSS                     []rssSample    `json:"-"`
	RSSFirstMiB             float64        `json:"rssFirstMiB"`
	RSSPeakMiB              float64        `json:"rssPeakMiB"`
	RSSLastMiB              float64        `json:"rssLastMiB"`
	// BacklogPeak and BacklogLast are the largest and the last sampled
	// backlog during the load (rssSample.Backlog).
	BacklogPeak int `json:"backlogPeak"`
	BacklogLast int `json:"backlogLast"`
	// SecondStore is the second store's Sessions and outages, and the
	// default store's append -> Current during them.
	SecondStore *secondStoreFigures `json:"secondStore"`
}

// report writes the summary and the RSS samples, and fails the soak on
// what a user would notice.
func (r *run) report(res result) {
	t := r.t
	res.DurationS = res.Duration.String()
	res.EventsPerSec = float64(res.Events) / res.Duration.Seconds()
	var tsv strings.Builder
	tsv.WriteString("seconds\trss_mib\tpid\tbacklog\n")
	for i, s := range res.RSS {
		fmt.Fprintf(&tsv, "%.0f\t%.1f\t%d\t%d\n", s.Seconds, s.MiB, s.PID, s.Backlog)
		res.BacklogPeak = max(res.BacklogPeak, s.Backlog)
		res.BacklogLast = s.Backlog
		if i == 0 {
			res.RSSFirstMiB = s.MiB
		}
		res.RSSPeakMiB = max(res.RSSPeakMiB, s.MiB)
		res.RSSLastMiB = s.MiB
	}
	_ = os.WriteFile(filepath.Join(r.dir, "rss.tsv"), []byte(tsv.String()), 0o644)
	summary, _ := json.MarshalIndent(res, "", "  ")
	_ = os.WriteFile(filepath.Join(r.dir, "summary.json"), summary, 0o644)
	t.Logf("soak summary:\n%s", summary)

	if res.Lost > 0 || res.Duplicated > 0 {
		t.Errorf("acknowledged events lost: %d, duplicated: %d", res.Lost, res.Duplicated)
	}
	if res.Invalid > 0 {
		t.Errorf("%d logs do not validate", res.Invalid)
	}
	if len(res.Mismatches) > 0 {
		t.Errorf("%d stored transcripts differ from an offline replay of the exported log:\n%s", len(res.Mismatches), strings.Join(res.Mismatches, "\n"))
	}
	if res.ForkAnomalies > 0 {
		t.Errorf("%d fork anomalies", res.ForkAnomalies)
	}
	if res.Events == 0 || res.Forks == 0 {
		t.Errorf("the soak did nothing: %d acknowledged events, %d forks", res.Events, res.Forks)
	}
	for kind, n := range res.Faults {
		if n == 0 {
			t.Errorf("no fault of kind %s was injected", kind)
		}
	}
	r.checkRSS(res.RSS)
	r.checkBacklog(res.RSS)
}

// checkBacklog fails on a backlog that grows through a long run: the
// samples of the last third of the load must stay within a margin of the
// peak of its first two thirds. The samples after the hosts stopped are
// left out: the backlog drains then, and a tail of zeros would hide a
// growth. A short run is too short for thirds to mean anything.
func (r *run) checkBacklog(samples []rssSample) {
	load := r.hostsStopped.Sub(r.began).Seconds()
	samples = slices.DeleteFunc(slices.Clone(samples), func(s rssSample) bool { return s.Seconds > load })
	if *flagDuration < 10*time.Minute || len(samples) < 6 {
		return
	}
	cut := len(samples) * 2 / 3
	early, late := 0, 0
	for _, s := range samples[:cut] {
		early = max(early, s.Backlog)
	}
	for _, s := range samples[cut:] {
		late = max(late, s.Backlog)
	}
	if bound := max(early*3/2, early+10); late > bound {
		r.t.Errorf("the backlog grew: %d Sessions not Current at most in the last third of the run, against %d before (bound %d)", late, early, bound)
	}
}

// checkRSS fails on a manager whose memory grows through the run: the
// samples of the last third must stay within a margin of the peak of the
// first two thirds (restarts start low, which the peak ignores).
func (r *run) checkRSS(samples []rssSample) {
	if len(samples) < 6 {
		r.t.Errorf("only %d RSS samples of the manager", len(samples))
		return
	}
	cut := len(samples) * 2 / 3
	var early, late []float64
	for _, s := range samples[:cut] {
		early = append(early, s.MiB)
	}
	for _, s := range samples[cut:] {
		late = append(late, s.MiB)
	}
	if e, l := slices.Max(early), slices.Max(late); l > e*1.5+64 {
		r.t.Errorf("manager RSS grew: peak %.0f MiB in the first two thirds, %.0f MiB in the last", e, l)
	}
}
