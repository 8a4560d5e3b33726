package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

const (
	// localIP is every pod's IP and the node's address: pods are processes
	// on this host and share its network.
	localIP = "127.0.0.1"

	// A kubelet reads at most this much of a termination message file, and
	// falls back to at most maxLogMessageLines / maxLogMessageBytes of the
	// log's tail (FallbackToLogsOnError).
	maxTerminationMessageBytes = 4096
	maxLogMessageLines         = 80
	maxLogMessageBytes         = 2048

	// exitCodeStartError is what container runtimes report for a container
	// that could not be started.
	exitCodeStartError = 128

	// A kubelet reports a container it lost track of with this reason and
	// exit code (that of SIGKILL).
	reasonContainerLost   = "ContainerStatusUnknown"
	exitCodeContainerLost = 137

	reasonErrImagePull = "ErrImagePull"
	reasonUnsupported  = "Unsupported"
	reasonStartError   = "StartError"
)

// processProvider is the virtual-kubelet provider behind the local node: it
// runs each pod's single container as a process on this host.
type processProvider struct {
	images  map[string]string
	podsDir string
	// lister gives the pod's current metadata for status reports, so a
	// status update never writes back stale labels or finalizers.
	lister corev1listers.PodLister
	// api removes a deleted pod once its process has exited, as a kubelet
	// does; virtual-kubelet alone would keep it Terminating for the whole
	// grace period.
	api corev1client.PodsGetter

	mu     sync.Mutex
	pods   map[string]*podProcess // by namespace/name
	notify func(*corev1.Pod)
	wg     sync.WaitGroup
}

// podProcess is one pod known to the provider. Its fields are guarded by
// processProvider.mu; wait reads cmd and logPath unguarded since they no
// longer change once the process runs.
type podProcess struct {
	pod  *corev1.Pod // spec as given, status as reported
	cmd  *exec.Cmd   // nil when the container never started
	done chan struct{}
	// forget removes the pod once its process has exited: it was deleted
	// from the API server.
	forget bool
	// deleted: the pod was deleted from the API server (not merely
	// abandoned by Stop), so it is removed there once its process is gone.
	deleted bool
	// grace is how long a deleted pod's process has between SIGTERM and
	// SIGKILL; killTimer sends the SIGKILL.
	grace     time.Duration
	killTimer *time.Timer
	logPath   string
}

func newProcessProvider(podsDir string, images map[string]string, lister corev1listers.PodLister, api corev1client.PodsGetter) *processProvider {
	return &processProvider{
		images:  images,
		podsDir: podsDir,
		lister:  lister,
		api:     api,
		pods:    map[string]*podProcess{},
		notify:  func(*corev1.Pod) {},
	}
}

func podKey(namespace, name string) string { return namespace + "/" + name }

// NotifyPods registers the callback through which pod status reaches the
// API server.
func (p *processProvider) NotifyPods(_ context.Context, notify func(*corev1.Pod)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = notify
}

// CreatePod starts the pod's container. Env references are already resolved
// into literal values by virtual-kubelet (kubelet's own rules). Problems
// with the pod itself end it Failed with a reason rather than returning an
// error, which virtual-kubelet would only retry.
func (p *processProvider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	pp := &podProcess{pod: pod.DeepCopy(), done: make(chan struct{})}
	p.mu.Lock()
	if old, ok := p.pods[key]; ok {
		if old.pod.UID == pod.UID {
			p.mu.Unlock()
			return nil
		}
		// A pod of the same name was force-deleted and recreated.
		p.killLocked(old)
	}
	p.pods[key] = pp
	p.mu.Unlock()

	if reason, msg := p.start(pp); reason != "" {
		p.finish(pp, func(st *corev1.PodStatus) { notStarted(st, pp.pod, reason, msg) })
		close(pp.done)
		return nil
	}
	p.report(pp)
	go p.wait(pp)
	return nil
}

// start runs the pod's container; on failure it returns a reason and
// message for the pod status.
func (p *processProvider) start(pp *podProcess) (reason, message string) {
	pod := pp.pod
	spec := &pod.Spec
	if len(spec.Containers) != 1 || len(spec.InitContainers) > 0 || len(spec.EphemeralContainers) > 0 {
		return reasonUnsupported, fmt.Sprintf("the local node runs exactly one container per pod; this pod has %d containers, %d init containers and %d ephemeral containers",
			len(spec.Containers), len(spec.InitContainers), len(spec.EphemeralContainers))
	}
	c := &spec.Containers[0]
	if len(c.VolumeMounts) > 0 || len(c.VolumeDevices) > 0 {
		return reasonUnsupported, fmt.Sprintf("container %q mounts volumes; the local node runs processes on the host filesystem and supports no volumes", c.Name)
	}
	if startedBefore(pod) {
		// Its process went with an earlier run of the cluster on the same
		// StateDir: report it lost, as a kubelet would report a container
		// whose runtime lost it, so its controller replaces it.
		return reasonContainerLost, "The container could not be located when the pod was terminated: the local node restarted while it ran"
	}
	binary, ok := resolveImage(p.images, c.Image)
	if !ok {
		return reasonErrImagePull, fmt.Sprintf("image %q is not mapped to a local binary (localcluster.Options.Images)", c.Image)
	}

	sandbox := filepath.Join(p.podsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
	if err := os.MkdirAll(sandbox, 0o755); err != nil {
		return reasonStartError, fmt.Sprintf("creating the pod sandbox: %v", err)
	}
	// The file a kubelet would bind-mount at the container's
	// terminationMessagePath; the process is pointed at it instead.
	termPath := filepath.Join(sandbox, "termination-log")
	if err := os.WriteFile(termPath, nil, 0o644); err != nil {
		return reasonStartError, fmt.Sprintf("creating the termination message file: %v", err)
	}
	logPath := filepath.Join(sandbox, "container.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return reasonStartError, fmt.Sprintf("creating the container log: %v", err)
	}
	defer logFile.Close()

	cmd := exec.Command(binary)
	cmd.Args = containerArgs(c, binary, termPath)
	cmd.Env = containerEnv(pod, c, sandbox, termPath)
	cmd.Dir = sandbox
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Its own process group so deletion reaches the whole process tree, and
	// killed with this process so a crashed test leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return reasonStartError, fmt.Sprintf("starting %s: %v", binary, err)
	}

	now := metav1.Now()
	p.wg.Add(1) // done by wait
	p.mu.Lock()
	defer p.mu.Unlock()
	pp.cmd, pp.logPath = cmd, logPath
	st := &pp.pod.Status
	st.Phase = corev1.PodRunning
	st.Reason, st.Message = "", ""
	st.HostIP, st.HostIPs = localIP, []corev1.HostIP{{IP: localIP}}
	st.PodIP, st.PodIPs = localIP, []corev1.PodIP{{IP: localIP}}
	if st.StartTime == nil {
		st.StartTime = &now
	}
	setConditions(st, corev1.ConditionTrue, "")
	st.ContainerStatuses = []corev1.ContainerStatus{{
		Name:        c.Name,
		Image:       c.Image,
		ImageID:     "file://" + binary,
		ContainerID: fmt.Sprintf("process://%d", cmd.Process.Pid),
		Ready:       true,
		Started:     ptr.To(true),
		State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}
	if pp.forget {
		// Deleted while starting.
		p.terminateLocked(pp)
	}
	return "", ""
}

// wait reports the container's end once its process exits.
func (p *processProvider) wait(pp *podProcess) {
	defer p.wg.Done()
	err := pp.cmd.Wait()
	exitCode := 0
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		exitCode = exitErr.ExitCode()
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			// The container runtime convention for a signalled process.
			exitCode = 128 + int(ws.Signal())
		}
	case err != nil:
		exitCode = exitCodeStartError
	}
	c := &pp.pod.Spec.Containers[0]
	sandbox := filepath.Dir(pp.logPath)
	msg := terminationMessage(filepath.Join(sandbox, "termination-log"), pp.logPath, c.TerminationMessagePolicy, exitCode)
	p.finish(pp, func(st *corev1.PodStatus) {
		reason := "Completed"
		if exitCode != 0 {
			reason = "Error"
		}
		cs := &st.ContainerStatuses[0]
		started := cs.State.Running.StartedAt
		cs.Ready, cs.Started = false, ptr.To(false)
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode:    int32(exitCode),
			Reason:      reason,
			Message:     msg,
			StartedAt:   started,
			FinishedAt:  metav1.Now(),
			ContainerID: cs.ContainerID,
		}}
		st.Phase = corev1.PodSucceeded
		if exitCode != 0 {
			st.Phase = corev1.PodFailed
		}
		setConditions(st, corev1.ConditionFalse, "PodCompleted")
	})
	close(pp.done)
}

// finish records a pod's terminal status, reports it, and forgets the pod
// if it was deleted meanwhile.
func (p *processProvider) finish(pp *podProcess, terminal func(*corev1.PodStatus)) {
	p.mu.Lock()
	terminal(&pp.pod.Status)
	if pp.killTimer != nil {
		pp.killTimer.Stop()
	}
	if pp.forget {
		p.removeLocked(pp)
	}
	deleted := pp.deleted
	p.mu.Unlock()
	p.report(pp)
	if deleted {
		p.removeFromAPI(pp.pod)
	}
}

// removeFromAPI deletes a pod whose process has exited from the API server
// at once (grace 0, only this UID), as a kubelet does after its containers
// stop. A pod already gone or replaced is left alone.
func (p *processProvider) removeFromAPI(pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := p.api.Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.Background().Error(err, "removing a deleted pod", "pod", klog.KObj(pod))
	}
}

// report sends pp's status to the API server, on the pod's current
// metadata. A pod gone from the API server, or replaced there by one of the
// same name, gets no report: virtual-kubelet keys reports by name, so it
// would land on the replacement.
func (p *processProvider) report(pp *podProcess) {
	p.mu.Lock()
	status := pp.pod.Status.DeepCopy()
	notify := p.notify
	p.mu.Unlock()
	cur, err := p.lister.Pods(pp.pod.Namespace).Get(pp.pod.Name)
	if err != nil || cur.UID != pp.pod.UID {
		return
	}
	out := cur.DeepCopy()
	out.Status = *status
	notify(out)
}

// UpdatePod has nothing to apply: the fields a pod update may change
// (image, labels, annotations, deadlines) do not reach a running process.
// A different UID means a same-named pod replaced the one known.
func (p *processProvider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	old, ok := p.pods[podKey(pod.Namespace, pod.Name)]
	replaced := ok && old.pod.UID != pod.UID
	p.mu.Unlock()
	if replaced || !ok {
		return p.CreatePod(ctx, pod)
	}
	return nil
}

// DeletePod stops the pod's process as a kubelet stops a container: SIGTERM
// to its process group, SIGKILL when the grace period ends. The pod is
// forgotten once its process has exited and its final status is reported.
func (p *processProvider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pp, ok := p.pods[podKey(pod.Namespace, pod.Name)]
	if !ok || pp.pod.UID != pod.UID {
		return errdefs.NotFoundf("pod %s/%s is not on the local node", pod.Namespace, pod.Name)
	}
	if pp.forget {
		return nil
	}
	pp.forget = true
	pp.deleted = true
	select {
	case <-pp.done:
		p.removeLocked(pp)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.removeFromAPI(pp.pod)
		}()
		return nil
	default:
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		grace = *pod.DeletionGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	pp.grace = time.Duration(grace) * time.Second
	if pp.cmd != nil { // else still starting, and start terminates it
		p.terminateLocked(pp)
	}
	return nil
}

// terminateLocked sends SIGTERM to pp's process group now and SIGKILL when
// its grace period ends.
func (p *processProvider) terminateLocked(pp *podProcess) {
	p.signalLocked(pp, syscall.SIGTERM)
	pp.killTimer = time.AfterFunc(pp.grace, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.signalLocked(pp, syscall.SIGKILL)
	})
}

// signalLocked signals pp's process group, if its process still runs.
func (p *processProvider) signalLocked(pp *podProcess, sig syscall.Signal) {
	if pp.cmd == nil || pp.cmd.Process == nil {
		return
	}
	select {
	case <-pp.done:
	default:
		_ = syscall.Kill(-pp.cmd.Process.Pid, sig)
	}
}

// killLocked kills pp's process group at once and forgets pp.
func (p *processProvider) killLocked(pp *podProcess) {
	pp.forget = true
	p.signalLocked(pp, syscall.SIGKILL)
	p.removeLocked(pp)
}

func (p *processProvider) removeLocked(pp *podProcess) {
	key := podKey(pp.pod.Namespace, pp.pod.Name)
	if p.pods[key] == pp {
		delete(p.pods, key)
	}
}

// shutdown kills every pod process and waits for them to be reaped.
func (p *processProvider) shutdown() {
	p.mu.Lock()
	for _, pp := range p.pods {
		p.signalLocked(pp, syscall.SIGKILL)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// GetPod returns the pod as the node knows it.
func (p *processProvider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pp, ok := p.pods[podKey(namespace, name)]
	if !ok {
		return nil, errdefs.NotFoundf("pod %s/%s is not on the local node", namespace, name)
	}
	return pp.pod.DeepCopy(), nil
}

// GetPodStatus returns the pod's status as the node knows it.
func (p *processProvider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods returns every pod the node knows.
func (p *processProvider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pods := make([]*corev1.Pod, 0, len(p.pods))
	for _, pp := range p.pods {
		pods = append(pods, pp.pod.DeepCopy())
	}
	return pods, nil
}

// GetContainerLogs serves `kubectl logs` from the container's log file.
func (p *processProvider) GetContainerLogs(_ context.Context, namespace, name, container string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	p.mu.Lock()
	pp, ok := p.pods[podKey(namespace, name)]
	var logPath string
	if ok {
		logPath = pp.logPath
	}
	p.mu.Unlock()
	if !ok || logPath == "" || pp.pod.Spec.Containers[0].Name != container {
		return nil, errdefs.NotFoundf("no logs of container %q in pod %s/%s on the local node", container, namespace, name)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		return nil, fmt.Errorf("reading the log of pod %s/%s: %w", namespace, name, err)
	}
	if opts.Tail > 0 {
		data = tailLines(data, opts.Tail)
	}
	if opts.LimitBytes > 0 && len(data) > opts.LimitBytes {
		data = data[:opts.LimitBytes]
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

var errUnsupported = errdefs.InvalidInput("not supported by the local node: its pods are plain processes")

// RunInContainer is not supported: a process has no container to exec in.
func (p *processProvider) RunInContainer(context.Context, string, string, string, []string, api.AttachIO) error {
	return errUnsupported
}

// AttachToContainer is not supported: the process's stdio goes to its log.
func (p *processProvider) AttachToContainer(context.Context, string, string, string, api.AttachIO) error {
	return errUnsupported
}

// PortForward is not supported: pods share the host's network, so their
// ports are reachable on 127.0.0.1 directly.
func (p *processProvider) PortForward(context.Context, string, string, int32, io.ReadWriteCloser) error {
	return errUnsupported
}

// GetStatsSummary is not supported: the node keeps no resource statistics.
func (p *processProvider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return nil, errUnsupported
}

// GetMetricsResource is not supported: the node keeps no resource metrics.
func (p *processProvider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, errUnsupported
}

// resolveImage maps an image to a local binary: by exact name first, then
// by name without its tag or digest.
func resolveImage(images map[string]string, image string) (string, bool) {
	if b, ok := images[image]; ok {
		return b, true
	}
	name := image
	if i := strings.Index(name, "@"); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	b, ok := images[name]
	return b, ok
}

// containerArgs is the process's argv. The image's binary stands for the
// image's entrypoint: it always runs. command[0] names a program inside the
// image, so it only becomes argv[0]; the rest of command and args follow.
// The container's terminationMessagePath is rewritten to termPath.
func containerArgs(c *corev1.Container, binary, termPath string) []string {
	argv := []string{binary}
	if len(c.Command) > 0 {
		argv = append([]string{c.Command[0]}, c.Command[1:]...)
	}
	argv = append(argv, c.Args...)
	for i := range argv[1:] {
		argv[i+1] = rewriteTerminationPath(c, argv[i+1], termPath)
	}
	return argv
}

// containerEnv is the process's environment: the container's (resolved)
// env and what a container runtime adds, with a PATH from the host since
// the process runs on the host's filesystem. Nothing else of the host's
// environment leaks in.
func containerEnv(pod *corev1.Pod, c *corev1.Container, sandbox, termPath string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + sandbox,
		"HOSTNAME=" + pod.Name,
	}
	for _, e := range c.Env {
		env = append(env, e.Name+"="+rewriteTerminationPath(c, e.Value, termPath))
	}
	return env
}

// rewriteTerminationPath replaces the container's terminationMessagePath in
// s by the sandbox file a kubelet would have bind-mounted there: a process
// cannot write /dev/termination-log.
func rewriteTerminationPath(c *corev1.Container, s, termPath string) string {
	path := c.TerminationMessagePath
	if path == "" {
		path = corev1.TerminationMessagePathDefault
	}
	return strings.ReplaceAll(s, path, termPath)
}

// terminationMessage is what a kubelet reports as the container's
// termination message: the file's first 4 KiB, or with
// FallbackToLogsOnError and an empty file on failure, the log's tail.
func terminationMessage(termPath, logPath string, policy corev1.TerminationMessagePolicy, exitCode int) string {
	msg := readPrefix(termPath, maxTerminationMessageBytes)
	if msg == "" && exitCode != 0 && policy == corev1.TerminationMessageFallbackToLogsOnError {
		data, err := os.ReadFile(logPath)
		if err == nil {
			data = tailLines(data, maxLogMessageLines)
			if len(data) > maxLogMessageBytes {
				data = data[len(data)-maxLogMessageBytes:]
			}
			msg = string(data)
		}
	}
	return msg
}

func readPrefix(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	data, _ := io.ReadAll(io.LimitReader(f, n))
	return string(data)
}

// tailLines returns the last n lines of data.
func tailLines(data []byte, n int) []byte {
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			n--
			if n == 0 {
				return data[i+1:]
			}
		}
	}
	return data
}

// startedBefore reports whether the API server already saw the pod's
// container start, i.e. on an earlier run of the node.
func startedBefore(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodRunning {
		return true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil {
			return true
		}
	}
	return false
}

// notStarted marks a pod whose container did not start (or was lost) as
// Failed: the node does not retry (restartPolicy Never semantics). Reasons
// a kubelet keeps retrying leave the container waiting; the others leave it
// terminated with a container runtime's exit code.
func notStarted(st *corev1.PodStatus, pod *corev1.Pod, reason, msg string) {
	st.Phase = corev1.PodFailed
	st.Reason, st.Message = reason, msg
	st.HostIP, st.HostIPs = localIP, []corev1.HostIP{{IP: localIP}}
	if st.StartTime == nil {
		now := metav1.Now()
		st.StartTime = &now
	}
	setConditions(st, corev1.ConditionFalse, "PodFailed")
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr.To(false)}
		switch reason {
		case reasonErrImagePull, reasonUnsupported:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
		case reasonContainerLost:
			cs.State.Terminated = &corev1.ContainerStateTerminated{
				ExitCode: exitCodeContainerLost, Reason: reason, Message: msg, FinishedAt: metav1.Now(),
			}
		default:
			cs.State.Terminated = &corev1.ContainerStateTerminated{
				ExitCode: exitCodeStartError, Reason: reason, Message: msg, FinishedAt: metav1.Now(),
			}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
}

// setConditions sets the readiness conditions a kubelet maintains.
func setConditions(st *corev1.PodStatus, ready corev1.ConditionStatus, reason string) {
	set := func(t corev1.PodConditionType, s corev1.ConditionStatus, reason string) {
		for i := range st.Conditions {
			if st.Conditions[i].Type == t {
				if st.Conditions[i].Status != s {
					st.Conditions[i].LastTransitionTime = metav1.Now()
				}
				st.Conditions[i].Status, st.Conditions[i].Reason = s, reason
				return
			}
		}
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: metav1.Now()})
	}
	set(corev1.PodInitialized, corev1.ConditionTrue, "")
	set(corev1.ContainersReady, ready, reason)
	set(corev1.PodReady, ready, reason)
}
