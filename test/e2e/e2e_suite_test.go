package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/turnlog/turnlog/internal/testutil/versitygw"
	"github.com/turnlog/turnlog/test/e2e/e2ebuild"
	"github.com/turnlog/turnlog/test/localcluster"
)

// Worker images. On the container node they are built from the
// Dockerfile's recipe (e2ebuild); on the process node they map to the
// built binary, a script that sleeps first, nothing, and the built
// workerprobe holding each run.
const (
	workerImage         = e2ebuild.WorkerImage
	slowWorkerImage     = e2ebuild.SlowWorkerImage
	oomWorkerImage      = e2ebuild.OOMWorkerImage
	slowRunsWorkerImage = e2ebuild.SlowRunsWorkerImage
	slowWorkerDelay     = "5"
)

// workerCredentialsSecret is the Secret config/manager tells the deployed
// manager to give worker pods (--worker-credentials-secret); against an
// external cluster it must exist in the suite's namespace, or worker pods
// stay Pending.
const workerCredentialsSecret = "turnlog-store-credentials"

// env is what every spec works against.
var env struct {
	root       string // the repository
	kubeconfig string
	kubectl    string
	turnlog    string // the built binary, for import and export
	storeURL   string
	// storeCredentials are the store's keys, given to worker pods through
	// workerCredentialsSecret; nil when the store needs none.
	storeCredentials map[string]string
	namespace        string
	clientset        kubernetes.Interface
	// cluster is the local cluster; nil against an external cluster.
	cluster *localcluster.Cluster
	// containerNode: the local cluster's pods are real containers
	// (E2E_NODE=container).
	containerNode bool
	manager       manager
}

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "turnlog e2e suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	// Worker pods, the Deployment controller and the manager all take
	// their time on a busy 2-core machine; every wait is an Eventually,
	// never a sleep.
	SetDefaultEventuallyTimeout(90 * time.Second)
	SetDefaultEventuallyPollingInterval(500 * time.Millisecond)

	root, err := filepath.Abs(filepath.Join("..", ".."))
	Expect(err).NotTo(HaveOccurred())
	env.root = root
	tmp := GinkgoT().TempDir()

	built := buildArtifacts(ctx, tmp)
	env.turnlog = built.Turnlog

	if external := os.Getenv("E2E_KUBECONFIG"); external != "" {
		useExternalCluster(external)
	} else {
		startLocalCluster(ctx, tmp, built)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", env.kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	env.clientset, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())

	// A namespace of its own per run, so that a run against a long-lived
	// cluster never meets a previous run's Sessions.
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	env.namespace = "turnlog-e2e-" + hex.EncodeToString(suffix)
	kubectl("create", "namespace", env.namespace)
	switch {
	case env.cluster == nil:
		copyWorkerCredentials(ctx)
	case env.storeCredentials != nil:
		_, err := env.clientset.CoreV1().Secrets(env.namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: workerCredentialsSecret, Namespace: env.namespace},
			StringData: env.storeCredentials,
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	}
})

// buildArtifacts finds what `make e2e-build` built in E2E_BUILD_DIR, or
// builds it into tmp when the suite runs without it (go test by hand).
// The suite's own waits are bounded; a build is not: on a slow machine it
// takes longer, and should.
func buildArtifacts(ctx context.Context, tmp string) e2ebuild.Artifacts {
	GinkgoHelper()
	withImages := os.Getenv("E2E_KUBECONFIG") == "" && os.Getenv("E2E_NODE") == "container"
	if dir := os.Getenv("E2E_BUILD_DIR"); dir != "" {
		By("using turnlog and the worker images built in " + dir)
		built, err := e2ebuild.Check(dir, withImages)
		Expect(err).NotTo(HaveOccurred())
		return built
	}
	By("building turnlog and, for the container node, the worker images from the Dockerfile's recipe")
	built, err := e2ebuild.Build(ctx, env.root, tmp, withImages)
	Expect(err).NotTo(HaveOccurred())
	return built
}

var _ = AfterSuite(func() {
	// Stop what the suite started in reverse order; each step runs even if
	// an earlier one fails, so no process outlives the suite.
	if env.cluster == nil {
		if env.namespace != "" && env.kubeconfig != "" {
			_ = exec.Command(env.kubectl, "--kubeconfig", env.kubeconfig, "delete", "namespace", env.namespace, "--wait=false").Run()
		}
		return
	}
	var errs []error
	if m, ok := env.manager.(*localManager); ok {
		errs = append(errs, m.stop())
	}
	errs = append(errs, env.cluster.Stop())
	for _, err := range errs {
		Expect(err).NotTo(HaveOccurred())
	}
})

// On failure, print what explains it: the objects as kubectl shows them,
// the worker pods' logs and the manager's log.
var _ = AfterEach(func() {
	if !CurrentSpecReport().Failed() || env.kubeconfig == "" {
		return
	}
	const kinds = "sessions,sessionforks,deployments,pods,events"
	out, _ := exec.Command(env.kubectl, "--kubeconfig", env.kubeconfig, "-n", env.namespace,
		"get", kinds, "-o", "wide").CombinedOutput()
	GinkgoWriter.Printf("\n--- kubectl get %s -n %s\n%s", kinds, env.namespace, out)
	out, _ = exec.Command(env.kubectl, "--kubeconfig", env.kubeconfig, "-n", env.namespace,
		"logs", "-l", poolWorkerLabel, "--prefix", "--tail=40").CombinedOutput()
	GinkgoWriter.Printf("\n--- worker pod logs\n%s", out)
	if env.manager != nil {
		GinkgoWriter.Printf("\n--- manager log\n%s\n", env.manager.logTail(300))
	}
})

// startLocalCluster starts the local cluster, the store and the manager in
// pod worker mode: with E2E_NODE=container, a container node and versitygw
// on the pod network; by default, the process node and a file:// store.
// The manager serves its worker pods on a port of the node's address (the
// pod network's, or 127.0.0.1 where pods are local processes), the same
// for every start of the suite's manager.
func startLocalCluster(ctx context.Context, tmp string, built e2ebuild.Artifacts) {
	switch node := os.Getenv("E2E_NODE"); node {
	case "container":
		startContainerCluster(ctx, tmp, built)
		return
	case "", "process":
	default:
		Fail("E2E_NODE=" + node + ": want container or process")
	}
	By("starting the local cluster")
	// Workers that start a few seconds late: the shell is replaced by the
	// worker, so the pod's process is the worker as with the real image.
	slow := filepath.Join(tmp, "turnlog-slow")
	script := "#!/bin/sh\nsleep " + slowWorkerDelay + "\nexec '" + env.turnlog + `' "$@"` + "\n"
	Expect(os.WriteFile(slow, []byte(script), 0o755)).To(Succeed())
	// Workers that hold each run a while: the probe, doing runs with the
	// built binary rather than the image's /turnlog.
	slowRuns := filepath.Join(tmp, "turnlog-slow-runs")
	script = "#!/bin/sh\nWORKERPROBE_TURNLOG='" + env.turnlog + "' exec '" + built.Workerprobe + `' --slow-runs "$@"` + "\n"
	Expect(os.WriteFile(slowRuns, []byte(script), 0o755)).To(Succeed())

	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cluster, err := localcluster.Start(startCtx, localcluster.Options{
		CRDDirectoryPaths: []string{filepath.Join(env.root, "config", "crd", "bases")},
		ManifestPaths:     []string{filepath.Join(env.root, "config", "admission", "forkedfrom_policy.yaml")},
		Images:            map[string]string{workerImage: env.turnlog, slowWorkerImage: slow, slowRunsWorkerImage: slowRuns},
	})
	Expect(err).NotTo(HaveOccurred())
	env.cluster = cluster
	env.kubeconfig = cluster.Kubeconfig
	env.kubectl = cluster.KubectlPath

	storeDir := filepath.Join(tmp, "store")
	Expect(os.MkdirAll(storeDir, 0o755)).To(Succeed())
	env.storeURL = "file://" + storeDir

	m := &localManager{
		bin:        env.turnlog,
		kubeconfig: env.kubeconfig,
		storeURL:   env.storeURL,
		logPath:    filepath.Join(tmp, "manager.log"),
		workerAddr: net.JoinHostPort(cluster.NodeIP, strconv.Itoa(freeHostPort(cluster.NodeIP))),
	}
	By("starting the manager, serving worker pods on " + m.workerAddr)
	Expect(m.start(workerImage)).To(Succeed())
	env.manager = m
}

// startContainerCluster starts the local cluster with a container node
// importing the built worker images, versitygw where pods reach it, and the
// manager, whose workers get the store's credentials from a Secret as
// deployed.
func startContainerCluster(ctx context.Context, tmp string, built e2ebuild.Artifacts) {
	By("starting the local cluster with a container node")
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cluster, err := localcluster.Start(startCtx, localcluster.Options{
		CRDDirectoryPaths: []string{filepath.Join(env.root, "config", "crd", "bases")},
		ManifestPaths:     []string{filepath.Join(env.root, "config", "admission", "forkedfrom_policy.yaml")},
		Node:              localcluster.ContainerNode,
		ImageArchives:     built.ImageArchives,
	})
	Expect(err).NotTo(HaveOccurred())
	env.cluster = cluster
	env.containerNode = true
	env.kubeconfig = cluster.Kubeconfig
	env.kubectl = cluster.KubectlPath

	By("starting versitygw on the pod network")
	srv := versitygw.StartOn(GinkgoTB(), cluster.NodeIP)
	env.storeURL = srv.URL
	// turnlog import/export and the manager read them from the environment.
	Expect(os.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)).To(Succeed())
	Expect(os.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)).To(Succeed())
	env.storeCredentials = map[string]string{"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey}

	m := &localManager{
		bin:        env.turnlog,
		kubeconfig: env.kubeconfig,
		storeURL:   env.storeURL,
		logPath:    filepath.Join(tmp, "manager.log"),
		args:       []string{"--worker-credentials-secret=" + workerCredentialsSecret},
		// Pods reach this host at its address on the pod network.
		workerAddr: net.JoinHostPort(cluster.NodeIP, strconv.Itoa(freeHostPort(cluster.NodeIP))),
	}
	By("starting the manager, serving worker pods on " + m.workerAddr)
	Expect(m.start(workerImage)).To(Succeed())
	env.manager = m
}

// useExternalCluster points the suite at a cluster where turnlog is
// deployed (make deploy) with E2E_IMAGE as its image.
func useExternalCluster(kubeconfig string) {
	Expect(os.Getenv("E2E_IMAGE")).NotTo(BeEmpty(), "E2E_KUBECONFIG is set: set E2E_IMAGE to the image deployed with `make deploy IMG=...`")
	env.storeURL = os.Getenv("E2E_STORE_URL")
	Expect(env.storeURL).NotTo(BeEmpty(), "E2E_KUBECONFIG is set: set E2E_STORE_URL to the store the deployed manager uses")
	env.kubeconfig = kubeconfig
	env.kubectl = kubectlBinary()
	managerNamespace := os.Getenv("E2E_MANAGER_NAMESPACE")
	if managerNamespace == "" {
		managerNamespace = "turnlog-system"
	}
	env.manager = &deployedManager{namespace: managerNamespace}
	// The suite tests E2E_IMAGE: refuse a deployment of another build.
	Expect(kubectl("get", "deployment", managerDeployment, "-n", managerNamespace,
		"-o", "jsonpath={.spec.template.spec.containers[0].image}")).To(Equal(os.Getenv("E2E_IMAGE")))
}

// kubectlBinary is the kubectl of the control plane `make control-plane`
// builds, else the one on PATH.
func kubectlBinary() string {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".local", "share", "kubebuilder-envtest", "k8s", "1.37.2-linux-amd64")
	}
	if _, err := os.Stat(filepath.Join(dir, "kubectl")); err == nil {
		return filepath.Join(dir, "kubectl")
	}
	path, err := exec.LookPath("kubectl")
	Expect(err).NotTo(HaveOccurred(), "no kubectl in %s or on PATH", dir)
	return path
}

// copyWorkerCredentials gives the suite's namespace the store credentials
// the deployed manager's workers use, or an empty Secret of that name when
// the store needs none (workload identity).
func copyWorkerCredentials(ctx context.Context) {
	m := env.manager.(*deployedManager)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: workerCredentialsSecret, Namespace: env.namespace}}
	src, err := env.clientset.CoreV1().Secrets(m.namespace).Get(ctx, workerCredentialsSecret, metav1.GetOptions{})
	switch {
	case err == nil:
		secret.Data = src.Data
	case !apierrors.IsNotFound(err):
		Expect(err).NotTo(HaveOccurred())
	}
	_, err = env.clientset.CoreV1().Secrets(env.namespace).Create(ctx, secret, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
}
