package localcluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/turnlog/turnlog/test/localcluster"
)

// shImage runs /bin/sh on the local node; the tag is there to show that
// images match by name without their tag.
const shImage = "example.com/tools/sh:1.0"

var (
	cluster   *localcluster.Cluster
	clientset kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// envtest logs through controller-runtime's logger.
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	cluster, err = localcluster.Start(ctx, localcluster.Options{
		Images: map[string]string{"example.com/tools/sh": "/bin/sh"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the local cluster:", err)
		return 1
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the local cluster:", err)
		}
	}()
	if clientset, err = kubernetes.NewForConfig(cluster.RESTConfig); err != nil {
		fmt.Fprintln(os.Stderr, "creating a client:", err)
		return 1
	}
	return m.Run()
}

func TestJobPodRunsToCompletionWithResolvedEnv(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := namespace(t)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns}, StringData: map[string]string{"token": "s3cr3t"}})
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "store", Namespace: ns}, StringData: map[string]string{"ACCESS_KEY": "AK1"}})
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns}, Data: map[string]string{"greeting": "hello"}})

	job := shJob(ns, "ok", 0, `echo "started $POD_NAME"; sleep 2
printf 'token=%s key=%s greeting=%s pod=%s optional=%s' "$TOKEN" "$ACCESS_KEY" "$GREETING" "$POD_NAME" "${OPTIONAL-unset}" > /dev/termination-log`)
	c := &job.Spec.Template.Spec.Containers[0]
	c.Env = []corev1.EnvVar{
		{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}},
		{Name: "GREETING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "greeting"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "OPTIONAL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Key: "x", Optional: ptr.To(true)}}},
	}
	// As the worker Jobs take their object-store credentials.
	c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "store"}}}}
	create(t, job)

	var sawRunning bool
	pod := waitForPod(t, ns, "job-name=ok", func(p *corev1.Pod) bool {
		if p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
			p.Status.ContainerStatuses[0].State.Running != nil && p.Status.PodIP == "127.0.0.1" &&
			p.Spec.NodeName == localcluster.DefaultNodeName {
			sawRunning = true
		}
		return p.Status.Phase == corev1.PodSucceeded
	})
	if !sawRunning {
		t.Errorf("pod %s was never seen Running on %s with IP 127.0.0.1", pod.Name, localcluster.DefaultNodeName)
	}
	term := terminated(t, pod)
	wantMsg := "token=s3cr3t key=AK1 greeting=hello pod=" + pod.Name + " optional=unset"
	if term.ExitCode != 0 || term.Reason != "Completed" || term.Message != wantMsg {
		t.Errorf("container terminated with exit code %d, reason %q, message %q; want 0, Completed, %q", term.ExitCode, term.Reason, term.Message, wantMsg)
	}
	waitForJobCondition(t, ns, "ok", batchv1.JobComplete)

	if status := kubectlPodStatus(t, ns, pod.Name); status != "Completed" {
		t.Errorf("kubectl get pod %s shows STATUS %q; want Completed", pod.Name, status)
	}
	logs, err := cluster.Kubectl(ctx, "logs", "-n", ns, pod.Name).CombinedOutput()
	if err != nil || !strings.Contains(string(logs), "started "+pod.Name) {
		t.Errorf("kubectl logs %s = %q (%v); want it to contain %q", pod.Name, logs, err, "started "+pod.Name)
	}
}

func TestFailingJobPodIsRetriedPerBackoffLimit(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	job := shJob(ns, "boom", 1, "")
	// No command, as in turnlog's worker Jobs: the image's entrypoint runs
	// with the container's args.
	c := &job.Spec.Template.Spec.Containers[0]
	c.Command, c.Args = nil, []string{"-c", `echo "disk on fire" >&2; exit 3`}
	create(t, job)

	waitForJobCondition(t, ns, "boom", batchv1.JobFailed)
	pods, err := clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "job-name=boom"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("job with backoffLimit 1 ran %d pods; want 2", len(pods.Items))
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Status.Phase != corev1.PodFailed {
			t.Errorf("pod %s is %s; want Failed", pod.Name, pod.Status.Phase)
		}
		// FallbackToLogsOnError: the script wrote no termination message.
		if term := terminated(t, pod); term.ExitCode != 3 || term.Reason != "Error" || term.Message != "disk on fire\n" {
			t.Errorf("pod %s terminated with exit code %d, reason %q, message %q; want 3, Error, the log's tail", pod.Name, term.ExitCode, term.Reason, term.Message)
		}
		if status := kubectlPodStatus(t, ns, pod.Name); status != "Error" {
			t.Errorf("kubectl get pod %s shows STATUS %q; want Error", pod.Name, status)
		}
	}
}

func TestDeletingRunningPodKillsItsProcessesAndJobReplacesIt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := namespace(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	job := shJob(ns, "long", 2, `sleep 300 & echo "$$ $!" > "$PID_FILE"; wait`)
	job.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PID_FILE", Value: pidFile}}
	create(t, job)

	first := waitForPod(t, ns, "job-name=long", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if status := kubectlPodStatus(t, ns, first.Name); status != "Running" {
		t.Errorf("kubectl get pod %s shows STATUS %q; want Running", first.Name, status)
	}
	var pids []int
	waitFor(t, 30*time.Second, "the pod's process to write its pids", func() bool {
		pids = readPIDs(pidFile)
		return len(pids) == 2
	})
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("process %d of running pod %s is not alive", pid, first.Name)
		}
	}
	if err := clientset.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the deleted pod's shell and its child to exit", func() bool {
		return !alive(pids[0]) && !alive(pids[1])
	})
	// Well inside the 30 s grace period: the node removes the pod as soon as
	// its process is gone, as a kubelet does.
	waitFor(t, 10*time.Second, "the deleted pod to leave the API server", func() bool {
		_, err := clientset.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	replacement := waitForPod(t, ns, "job-name=long", func(p *corev1.Pod) bool {
		return p.UID != first.UID && p.Status.Phase == corev1.PodRunning
	})
	if replacement.Name == first.Name {
		t.Errorf("replacement pod has the deleted pod's name %s", first.Name)
	}
}

func TestPodWithUnmappedImageFails(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "nowhere", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: "registry.example/unknown:1"}},
		},
	})
	pod := waitForPod(t, ns, "", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if pod.Status.Reason != "ErrImagePull" || !strings.Contains(pod.Status.Message, `"registry.example/unknown:1"`) {
		t.Errorf("pod failed with reason %q, message %q; want ErrImagePull naming the image", pod.Status.Reason, pod.Status.Message)
	}
	if status := kubectlPodStatus(t, ns, pod.Name); status != "ErrImagePull" {
		t.Errorf("kubectl get pod %s shows STATUS %q; want ErrImagePull", pod.Name, status)
	}
}

// shJob is a Job whose single pod runs script with /bin/sh.
func shJob(ns, name string, backoffLimit int32, script string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(backoffLimit),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				AutomountServiceAccountToken:  ptr.To(false),
				TerminationGracePeriodSeconds: ptr.To[int64](10),
				Containers: []corev1.Container{{
					Name:                     "main",
					Image:                    shImage,
					Command:                  []string{"sh", "-c", script},
					TerminationMessagePath:   corev1.TerminationMessagePathDefault,
					TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				}},
			}},
		},
	}
}

// namespace creates a namespace of the test's own.
func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lc-"}}
	ns, err := clientset.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func create(t *testing.T, obj any) {
	t.Helper()
	ctx := t.Context()
	var err error
	switch o := obj.(type) {
	case *corev1.Secret:
		_, err = clientset.CoreV1().Secrets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *corev1.ConfigMap:
		_, err = clientset.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *corev1.Pod:
		_, err = clientset.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *batchv1.Job:
		_, err = clientset.BatchV1().Jobs(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		t.Fatalf("create: unsupported %T", obj)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitForPod polls the pods of ns matching selector, each seen through
// done, until done accepts one; it returns that pod.
func waitForPod(t *testing.T, ns, selector string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	return waitForPodOf(t, clientset, ns, selector, done)
}

func waitForPodOf(t *testing.T, cs kubernetes.Interface, ns, selector string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	// Generous: a replacement waits out the Job controller's backoff for
	// the pod that failed, and on a busy machine the controller manager
	// and the node take their time; a slow machine must not make it red.
	// Past 5 minutes too: a Job controller that missed a pod's event waits
	// for its expectations to expire (controller.ExpectationsTimeout)
	// before it syncs the Job again.
	waitFor(t, 6*time.Minute, fmt.Sprintf("a pod in %s matching %q", ns, selector), func() bool {
		pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false
		}
		for i := range pods.Items {
			if done(&pods.Items[i]) {
				found = &pods.Items[i]
				return true
			}
		}
		return false
	})
	return found
}

func waitForJobCondition(t *testing.T, ns, name string, cond batchv1.JobConditionType) {
	t.Helper()
	waitFor(t, time.Minute, fmt.Sprintf("Job %s/%s to be %s", ns, name, cond), func() bool {
		job, err := clientset.BatchV1().Jobs(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range job.Status.Conditions {
			if c.Type == cond && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func terminated(t *testing.T, pod *corev1.Pod) *corev1.ContainerStateTerminated {
	t.Helper()
	if len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("pod %s has no terminated container: %+v", pod.Name, pod.Status.ContainerStatuses)
	}
	return pod.Status.ContainerStatuses[0].State.Terminated
}

// kubectlPodStatus is the STATUS column of `kubectl get pod`.
func kubectlPodStatus(t *testing.T, ns, name string) string {
	t.Helper()
	out, err := cluster.Kubectl(t.Context(), "get", "pod", "-n", ns, name, "--no-headers").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get pod %s: %v: %s", name, err, out)
	}
	// NAME READY STATUS RESTARTS AGE
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		t.Fatalf("kubectl get pod %s printed %q", name, out)
	}
	return fields[2]
}

func readPIDs(path string) []int {
	data, err := os.ReadFile(path)
	if err != nil || !strings.HasSuffix(string(data), "\n") {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil
		}
		pids = append(pids, pid)
	}
	return pids
}

// alive reports whether pid is a process that has not exited; a zombie
// (exited, not yet reaped by its parent) counts as exited.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := strings.LastIndexByte(string(data), ')')
	return i < 0 || i+2 >= len(data) || data[i+2] != 'Z'
}

// A cluster started again on its StateDir keeps its objects (this is what
// `make dev` relies on), Stop leaves no pod process behind, and a pod that
// was running when the cluster stopped is reported lost, so its Job
// replaces it.
func TestRestartOnStateDirKeepsObjectsAndReplacesLostPods(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	opts := localcluster.Options{
		StateDir: t.TempDir(),
		Images:   map[string]string{"example.com/tools/sh": "sh"},
	}
	first, err := localcluster.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(first.RESTConfig)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "restart"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pids")
	job := shJob("restart", "survivor", 1, `sleep 300 & echo "$$ $!" > "$PID_FILE"; wait`)
	job.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PID_FILE", Value: pidFile}}
	if _, err := cs.BatchV1().Jobs("restart").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pids []int
	waitFor(t, time.Minute, "the pod's process to write its pids", func() bool {
		pids = readPIDs(pidFile)
		return len(pids) == 2
	})
	lost := waitForPodOf(t, cs, "restart", "job-name=survivor", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d of pod %s outlived Stop", pid, lost.Name)
		}
	}

	second, err := localcluster.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := second.Stop(); err != nil {
			t.Error(err)
		}
	})
	cs = kubernetes.NewForConfigOrDie(second.RESTConfig)
	if _, err := cs.BatchV1().Jobs("restart").Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
		t.Fatalf("Job created before the restart: %v", err)
	}
	before := waitForPodOf(t, cs, "restart", "job-name=survivor", func(p *corev1.Pod) bool {
		return p.UID == lost.UID && p.Status.Phase == corev1.PodFailed
	})
	if term := terminated(t, before); term.Reason != "ContainerStatusUnknown" || term.ExitCode != 137 {
		t.Errorf("pod running across the restart ended with reason %q, exit code %d; want ContainerStatusUnknown, 137", term.Reason, term.ExitCode)
	}
	waitForPodOf(t, cs, "restart", "job-name=survivor", func(p *corev1.Pod) bool {
		return p.UID != lost.UID && p.Status.Phase == corev1.PodRunning
	})
}

// TestAPIServerRestart: after kube-apiserver is killed and started again,
// the objects are there, the same clients work, and the controllers and
// the node run a new Job. Not parallel: the others would see the outage.
func TestAPIServerRestart(t *testing.T) {
	ns := namespace(t)
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: ns}})
	if err := cluster.RestartAPIServer(t.Context(), time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("the ConfigMap made before the restart: %v", err)
	}
	create(t, shJob(ns, "after", 0, "exit 0"))
	waitForJobCondition(t, ns, "after", batchv1.JobComplete)
	// A second restart kills the process the first one started.
	if err := cluster.RestartAPIServer(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), cluster.KubectlPath, "--kubeconfig="+cluster.Kubeconfig, "get", "configmap", "before", "-n", ns).CombinedOutput(); err != nil {
		t.Fatalf("kubectl after two restarts: %v: %s", err, out)
	}
}
