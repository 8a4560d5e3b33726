package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// managerDeployment is the manager's Deployment in config/manager.
const managerDeployment = "turnlog-manager"

// tryKubectl runs the real kubectl against the suite's cluster, in the
// suite's namespace unless args name another, and returns its stdout.
func tryKubectl(args ...string) (string, error) {
	return tryKubectlWithInput(nil, args...)
}

// tryKubectlWithInput is tryKubectl with stdin, e.g. a manifest for
// `kubectl apply -f -`.
func tryKubectlWithInput(stdin []byte, args ...string) (string, error) {
	return runKubectl(env.namespace, stdin, args...)
}

// kubectlAllNamespaces runs kubectl with no --namespace, as a user types
// `kubectl ... -A`, and returns its stdout; it must succeed. (Beside an
// explicit --namespace, `kubectl delete -A -l ...` refuses the objects of
// other namespaces.)
func kubectlAllNamespaces(args ...string) string {
	GinkgoHelper()
	out, err := runKubectl("", nil, append(args, "--all-namespaces")...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// runKubectl runs kubectl with stdin, in namespace unless it is empty.
func runKubectl(namespace string, stdin []byte, args ...string) (string, error) {
	full := []string{"--kubeconfig", env.kubeconfig}
	if namespace != "" {
		full = append(full, "--namespace", namespace)
	}
	cmd := exec.Command(env.kubectl, append(full, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// kubectl is tryKubectl for commands that must succeed.
func kubectl(args ...string) string {
	GinkgoHelper()
	out, err := tryKubectl(args...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// kubectlWithInput is tryKubectlWithInput for commands that must succeed.
func kubectlWithInput(stdin []byte, args ...string) string {
	GinkgoHelper()
	out, err := tryKubectlWithInput(stdin, args...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// turnlog runs the built turnlog CLI (import, export) against the suite's
// cluster, namespace (unless args name another: the last -n counts) and
// store, and returns its stdout.
func turnlog(command string, args ...string) string {
	GinkgoHelper()
	return turnlogWithInput(nil, command, args...)
}

// turnlogWithInput is turnlog with stdin, e.g. events for `turnlog append`.
func turnlogWithInput(stdin []byte, command string, args ...string) string {
	GinkgoHelper()
	full := append([]string{command, "--kubeconfig", env.kubeconfig, "-n", env.namespace, "--store-url", env.storeURL}, args...)
	cmd := exec.Command(env.turnlog, full...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	Expect(cmd.Run()).To(Succeed(), "turnlog %s: %s", strings.Join(full, " "), stderr.String())
	return stdout.String()
}

// columnGap separates the columns of kubectl's tables (it pads with at
// least three spaces), while a header such as "LAST END" has one.
var columnGap = regexp.MustCompile(`\s{2,}`)

// getRow returns the one row `kubectl get KIND NAME` prints, by column
// header: what a user reads.
func getRow(g Gomega, kind, name string) map[string]string {
	out, err := tryKubectl("get", kind, name)
	g.Expect(err).NotTo(HaveOccurred())
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(2), "kubectl get %s %s:\n%s", kind, name, out)
	header := columnGap.Split(strings.TrimSpace(lines[0]), -1)
	values := columnGap.Split(strings.TrimSpace(lines[1]), -1)
	g.Expect(values).To(HaveLen(len(header)), "kubectl get %s %s:\n%s", kind, name, out)
	row := make(map[string]string, len(header))
	for i, h := range header {
		row[h] = values[i]
	}
	return row
}

// jsonpath returns `kubectl get KIND NAME -o jsonpath=EXPR`.
func jsonpath(kind, name, expr string) (string, error) {
	return tryKubectl("get", kind, name, "-o", "jsonpath="+expr)
}

// sampleLines is the sample log's first n lines, newlines included.
func sampleLines(sample []byte, n int) []byte {
	GinkgoHelper()
	lines := bytes.SplitAfter(sample, []byte("\n"))
	Expect(len(lines)).To(BeNumerically(">=", n))
	return bytes.Join(lines[:n], nil)
}

// workerPod is what a watch saw of one pod of the suite's namespace.
type workerPod struct {
	name string
	// pool: labelled as the namespace's worker pods (poolWorkerLabel);
	// session: the turnlog.dev/session label, which no worker pod has.
	pool    bool
	session string
	// before: the pod existed when the watch started.
	before bool
	// phases in the order they were reported, without repeats.
	phases []corev1.PodPhase
}

// podRecorder records the phases of the pods in the suite's namespace from
// a watch, so that a phase held for only a moment is seen as long as the
// node reported it.
type podRecorder struct {
	mu   sync.Mutex
	pods map[string]*workerPod
}

// recordPods starts watching the suite's namespace's pods until ctx ends.
// Pods that exist already are recorded with their current phase.
func recordPods(ctx context.Context) *podRecorder {
	GinkgoHelper()
	pods := env.clientset.CoreV1().Pods(env.namespace)
	list, err := pods.List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	r := &podRecorder{pods: map[string]*workerPod{}}
	for i := range list.Items {
		r.observe(&list.Items[i])
		r.pods[list.Items[i].Name].before = true
	}
	// A RetryWatcher resumes from the last resource version it saw, so no
	// status update is lost if the API server ends the watch.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return pods.Watch(ctx, opts)
		},
	})
	Expect(err).NotTo(HaveOccurred())
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				r.observe(pod)
			}
		}
	}()
	return r
}

func (r *podRecorder) observe(pod *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[pod.Name]
	if !ok {
		p = &workerPod{
			name:    pod.Name,
			pool:    pod.Labels[poolLabelKey] == "true",
			session: pod.Labels[turnlogv1.LabelSession],
		}
		r.pods[pod.Name] = p
	}
	if n := len(p.phases); n == 0 || p.phases[n-1] != pod.Status.Phase {
		p.phases = append(p.phases, pod.Status.Phase)
	}
}

// seen returns a copy of what was seen of every pod.
func (r *podRecorder) seen() []workerPod {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]workerPod, 0, len(r.pods))
	for _, p := range r.pods {
		c := *p
		c.phases = append([]corev1.PodPhase(nil), p.phases...)
		out = append(out, c)
	}
	return out
}

// freeHostPort is a TCP port free on this machine's address host now.
func freeHostPort(host string) int {
	GinkgoHelper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// manager is the turnlog manager the suite runs against.
type manager interface {
	// kill ends the manager at once, with no chance to clean up, as SIGKILL
	// or a lost node would.
	kill() error
	// restart has a killed manager running again.
	restart() error
	// logTail returns the manager's last n log lines.
	logTail(n int) string
}

// localManager runs `turnlog manager` as a subprocess of the suite.
type localManager struct {
	bin, kubeconfig, storeURL, logPath string
	// workerAddr is HOST:PORT, where every start of the manager serves its
	// worker pods (--worker-listen) and where they dial it
	// (--worker-endpoint=https://workerAddr): chosen once, so that the
	// endpoint is the same across restarts.
	workerAddr string
	// args are given to every start; extra only to the current one.
	args, extra []string
	image       string
	cmd         *exec.Cmd
	done        chan struct{}
}

// endpoint is the URL the manager's worker pods dial.
func (m *localManager) endpoint() string { return "https://" + m.workerAddr }

// start runs the manager with worker pods of the given image.
func (m *localManager) start(image string) error {
	logFile, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child holds its own descriptor
	args := append([]string{"manager",
		"--store-url=" + m.storeURL,
		"--worker-mode=pod",
		"--worker-image=" + image,
		"--worker-listen=" + m.workerAddr,
		"--worker-endpoint=" + m.endpoint(),
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
	}, append(slices.Clone(m.args), m.extra...)...)
	fmt.Fprintf(logFile, "=== %s: turnlog %s\n", time.Now().UTC().Format(time.RFC3339), strings.Join(args, " "))
	cmd := exec.Command(m.bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+m.kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Should the suite itself be killed, the kernel ends the manager too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the manager: %w", err)
	}
	m.cmd, m.image, m.done = cmd, image, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(m.done)
	}()
	return nil
}

// stop ends the manager as a Deployment would: SIGTERM, then SIGKILL if it
// has not exited after a grace period.
func (m *localManager) stop() error {
	if m.cmd == nil {
		return nil
	}
	defer func() { m.cmd = nil }()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
		return nil
	case <-time.After(15 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
		return errors.New("the manager did not stop within 15s of SIGTERM")
	}
}

// restartWith stops the manager and starts it again with worker pods of
// another image and the given extra flags (until the next restartWith);
// never are two managers running at once.
func (m *localManager) restartWith(image string, extra ...string) error {
	if err := m.stop(); err != nil {
		return err
	}
	m.extra = extra
	return m.start(image)
}

func (m *localManager) kill() error {
	if m.cmd == nil {
		return errors.New("the manager is not running")
	}
	_ = m.cmd.Process.Kill()
	<-m.done
	m.cmd = nil
	return nil
}

func (m *localManager) restart() error {
	return m.start(m.image)
}

// logSinceStart returns what the manager logged since its last start.
func (m *localManager) logSinceStart() string {
	data, err := os.ReadFile(m.logPath)
	if err != nil {
		return err.Error()
	}
	text := string(data)
	if i := strings.LastIndex(text, "\n=== "); i >= 0 {
		text = text[i+1:]
	}
	return text
}

func (m *localManager) logTail(n int) string {
	data, err := os.ReadFile(m.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// deployedManager is the manager Deployment of `make deploy`.
type deployedManager struct {
	namespace string
}

// kill force-deletes the manager's pods: no grace period, as a crash.
func (m *deployedManager) kill() error {
	_, err := tryKubectl("delete", "pod", "-n", m.namespace,
		"-l", "app.kubernetes.io/name=turnlog,app.kubernetes.io/component=manager",
		"--grace-period=0", "--force", "--wait=false")
	return err
}

// restart waits for the Deployment to replace the pods kill deleted.
func (m *deployedManager) restart() error {
	_, err := tryKubectl("rollout", "status", "deployment/"+managerDeployment, "-n", m.namespace, "--timeout=3m")
	return err
}

func (m *deployedManager) logTail(n int) string {
	out, err := tryKubectl("logs", "deployment/"+managerDeployment, "-n", m.namespace, fmt.Sprintf("--tail=%d", n))
	if err != nil {
		return err.Error()
	}
	return out
}
