package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/store"
)

// The path a user takes without Docker: `make image`, import, then the
// one-file install a release ships, `make build-installer` (dist/install.yaml),
// applied with kubectl as it is — no kustomize on the cluster side. On the
// container node the manager Deployment itself runs as a container, in a
// namespace that enforces the restricted Pod Security Standard, talks to the
// API server through the `kubernetes` Service with its service-account
// token, and reconciles a Session and a fork.
var _ = Describe("the one-file install of the locally built image", func() {
	It("runs the manager as a container under the restricted Pod Security Standard and reconciles a Session and a fork", func(ctx SpecContext) {
		m := needContainerNode()
		const namespace = "turnlog-system"

		By("stopping the suite's manager, so the deployed one is the only one")
		Expect(m.stop()).To(Succeed())
		DeferCleanup(func() { Expect(m.start(workerImage)).To(Succeed()) })

		By("writing install.yaml with make build-installer IMG=" + workerImage)
		installer := filepath.Join(GinkgoT().TempDir(), "install.yaml")
		build := exec.CommandContext(ctx, "make", "--no-print-directory", "build-installer", "IMG="+workerImage, "INSTALLER="+installer)
		build.Dir = env.root
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "make build-installer:\n%s", out)
		data, err := os.ReadFile(installer)
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Count(string(data), "image: "+workerImage+"\n")).To(Equal(1), "the manager's image is IMG")

		By("pointing the default store of its turnlog-stores ConfigMap at the suite's, as an operator edits it")
		// The default store of the turnlog-stores ConfigMap ("NAME URL").
		storeLine := regexp.MustCompile(`(?m)^(\s+)default s3://\S+$`)
		Expect(storeLine.Match(data)).To(BeTrue(), "no default store in %s", installer)
		data = storeLine.ReplaceAll(data, []byte("${1}default "+strings.ReplaceAll(env.storeURL, "$", "$$")))
		Expect(os.WriteFile(installer, data, 0o644)).To(Succeed())
		createStoreCredentials(ctx, namespace)

		By("leaving the record of a log a deleted Session left behind in the manager's namespace, as a manager that gave up on its store does")
		const orphanUID, orphanLabel = "00000000-0000-4000-8000-00000000e2e0", "turnlog.dev/orphaned-log"
		bucket, err := store.Open(ctx, env.storeURL, &store.Options{
			AccessKeyID: env.storeCredentials["AWS_ACCESS_KEY_ID"], SecretAccessKey: env.storeCredentials["AWS_SECRET_ACCESS_KEY"],
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(bucket.Close)
		orphanRoot, neighbour := "e2e-orphans/gone/"+orphanUID+"/", "e2e-orphans/gone/another-uid/"
		for _, key := range []string{orphanRoot + "log/00000000000000000000.jsonl", orphanRoot + "derived/assembly", neighbour + "log/00000000000000000000.jsonl"} {
			Expect(bucket.Put(ctx, key, []byte(`{"seq":0}`+"\n"), nil)).To(Succeed())
		}
		_, err = env.clientset.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "turnlog-orphaned-log-" + orphanUID, Namespace: namespace, Labels: map[string]string{orphanLabel: "true"}},
			Data: map[string]string{"store": "default", "namespace": "e2e-orphans", "session": "gone", "uid": orphanUID,
				"location": "default:e2e-orphans/gone/" + orphanUID, "reason": "the store timed out"},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		By("applying it with kubectl apply -f, as an operator does: the file names its namespaces")
		apply := exec.CommandContext(ctx, env.kubectl, "--kubeconfig", env.kubeconfig, "apply", "-f", installer)
		out, err = apply.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "kubectl apply -f install.yaml:\n%s", out)
		DeferCleanup(func() {
			// Gone before the suite's manager is back: never two managers.
			kubectl("delete", "deployment", managerDeployment, "-n", namespace, "--wait=true")
			expectNoManagerPods(namespace)
		})

		By("seeing the manager Deployment available, its pod a container in a restricted namespace")
		expectManagerContainerRunning(namespace)

		By("seeing the deployed manager's orphan sweep delete that log, and nothing beside it, with the permissions the install gives it")
		Eventually(func() (string, error) {
			return tryKubectl("get", "configmaps", "-n", namespace, "-l", orphanLabel, "-o", "name")
		}).WithTimeout(time.Minute).Should(BeEmpty())
		keys := func(prefix string) []string {
			var out []string
			for o, err := range bucket.List(ctx, prefix) {
				Expect(err).NotTo(HaveOccurred())
				out = append(out, o.Key)
			}
			return out
		}
		Expect(keys(orphanRoot)).To(BeEmpty())
		Expect(keys(neighbour)).To(ConsistOf(neighbour + "log/00000000000000000000.jsonl"))
		Eventually(func() (string, error) {
			return tryKubectl("get", "events", "-n", namespace, "--field-selector", "reason="+turnlogv1.EventOrphanedLogDeleted, "-o", "jsonpath={.items[*].message}")
		}).Should(Equal("deleted the log Session e2e-orphans/gone left at default:e2e-orphans/gone/" + orphanUID + " (2 objects)"))

		expectDeployedManagerReconciles(namespace, "deployed")
	})
})

// createStoreCredentials creates the store credentials Secret the manager
// reads in namespace (config/manager's turnlog-store-credentials), and the
// namespace if it does not exist yet. A Secret an earlier install left
// there holds the same keys.
func createStoreCredentials(ctx context.Context, namespace string) {
	GinkgoHelper()
	if _, err := tryKubectl("get", "namespace", namespace); err != nil {
		kubectl("create", "namespace", namespace)
	}
	_, err := env.clientset.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: workerCredentialsSecret, Namespace: namespace},
		StringData: env.storeCredentials,
	}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// expectManagerContainerRunning waits until the manager Deployment in
// namespace has rolled out, its pod a ready container of the suite's image
// in a namespace that enforces the restricted Pod Security Standard.
func expectManagerContainerRunning(namespace string) {
	GinkgoHelper()
	Expect(kubectl("get", "namespace", namespace, "-o", `jsonpath={.metadata.labels.pod-security\.kubernetes\.io/enforce}`)).To(Equal("restricted"))
	Eventually(func() (string, error) {
		return tryKubectl("rollout", "status", "deployment/"+managerDeployment, "-n", namespace, "--timeout=10s")
	}).WithTimeout(3 * time.Minute).Should(ContainSubstring("successfully rolled out"))
	Expect(kubectl("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=manager",
		"-o", `jsonpath={.items[0].spec.containers[0].image} {.items[0].status.containerStatuses[0].ready} {.items[0].status.containerStatuses[0].containerID}`)).
		To(MatchRegexp(`^` + workerImage + ` true containerd://[0-9a-f]{64}$`))
}

// expectNoManagerPods waits until no manager pod is left in namespace, so
// that the suite's manager never runs beside a deployed one.
func expectNoManagerPods(namespace string) {
	GinkgoHelper()
	Eventually(func() (string, error) {
		return tryKubectl("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=manager", "-o", "name")
	}).Should(BeEmpty())
}

// expectDeployedManagerReconciles imports the sample as Session name and
// forks it: the deployed manager in namespace reconciles both, its worker
// pods, which dial the manager's pod on port 9444, replaying the child.
func expectDeployedManagerReconciles(namespace, name string) {
	GinkgoHelper()
	child := name + "-retry"
	By("importing a Session the deployed manager reconciles")
	importSample(name)
	expectSessionShows(name, map[string]string{"HEAD": "22", "TURNS": "4", "DEGRADED": "1"})

	By("seeing the suite's namespace's worker pods dial the manager's pod at its address, port 9444")
	Eventually(func(g Gomega) {
		ip, err := tryKubectl("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=manager",
			"-o", `jsonpath={range .items[?(@.status.phase=="Running")]}{.status.podIP}{"\n"}{end}`)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.Fields(ip)).To(HaveLen(1), "the manager's Running pods' addresses: %q", ip)
		args, err := jsonpath("deployment", poolWorkerName, "{.spec.template.spec.containers[0].args}")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(args).To(ContainSubstring(`"--endpoint=https://` + strings.TrimSpace(ip) + `:9444"`))
	}).Should(Succeed())

	By("forking it: the deployed manager makes the child, and its workers replay it")
	fork := "apiVersion: turnlog.dev/v1alpha1\nkind: SessionFork\nmetadata:\n  name: " + child +
		"\nspec:\n  source:\n    name: " + name + "\n  atSeq: \"15.1\"\n"
	forkFile := filepath.Join(GinkgoT().TempDir(), "fork.yaml")
	Expect(os.WriteFile(forkFile, []byte(fork), 0o644)).To(Succeed())
	kubectl("apply", "-f", forkFile)
	Eventually(jsonpath).WithArguments("sessionfork", child, `{.status.conditions[?(@.type=="Succeeded")].status}`).
		Should(Equal("True"))
	Expect(jsonpath("sessionfork", child, "{.status.cutSeq} {.status.childName}")).To(Equal("16 " + child))
	Expect([]byte(turnlog("export", "--session", child))).To(Equal(sampleLines(readSample(), forkCutLines)))
	expectSessionShows(child, map[string]string{"HEAD": "16", "TURNS": "3", "LAST END": "aborted"})
}
