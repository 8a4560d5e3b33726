package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The path a user takes without Docker: `make image`, import, `make
// deploy`. On the container node the manager Deployment itself runs as a
// container, in a namespace that enforces the restricted Pod Security
// Standard, talks to the API server through the `kubernetes` Service with
// its service-account token, and reconciles a Session.
var _ = Describe("make deploy of the locally built image", func() {
	It("runs the manager as a container under the restricted Pod Security Standard and reconciles a Session", func(ctx SpecContext) {
		m := needContainerNode()
		const namespace = "turnlog-system"

		By("stopping the suite's manager, so the deployed one is the only one")
		Expect(m.stop()).To(Succeed())
		DeferCleanup(func() { Expect(m.start(workerImage)).To(Succeed()) })

		By("running make deploy IMG=" + workerImage + " on a copy of config/ whose store is the suite's")
		deployDir := filepath.Join(GinkgoT().TempDir(), "config")
		Expect(exec.Command("cp", "-a", filepath.Join(env.root, "config"), deployDir).Run()).To(Succeed())
		managerYAML := filepath.Join(deployDir, "manager", "manager.yaml")
		data, err := os.ReadFile(managerYAML)
		Expect(err).NotTo(HaveOccurred())
		// The default store of the turnlog-stores ConfigMap ("NAME URL").
		storeLine := regexp.MustCompile(`(?m)^(\s+)default s3://\S+$`)
		Expect(storeLine.Match(data)).To(BeTrue(), "no default store in %s", managerYAML)
		data = storeLine.ReplaceAll(data, []byte("${1}default "+strings.ReplaceAll(env.storeURL, "$", "$$")))
		Expect(os.WriteFile(managerYAML, data, 0o644)).To(Succeed())
		if _, err := tryKubectl("get", "namespace", namespace); err != nil {
			kubectl("create", "namespace", namespace)
		}
		_, err = env.clientset.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: workerCredentialsSecret, Namespace: namespace},
			StringData: env.storeCredentials,
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		deploy := exec.CommandContext(ctx, "make", "--no-print-directory", "deploy",
			"IMG="+workerImage, "DEPLOY_DIR="+deployDir, "KUBECTL="+env.kubectl+" --kubeconfig="+env.kubeconfig)
		deploy.Dir = env.root
		out, err := deploy.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "make deploy:\n%s", out)
		DeferCleanup(func() {
			// Gone before the suite's manager is back: never two managers.
			kubectl("delete", "deployment", managerDeployment, "-n", namespace, "--wait=true")
			Eventually(func() (string, error) {
				return tryKubectl("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=manager", "-o", "name")
			}).Should(BeEmpty())
		})

		By("seeing the manager Deployment available, its pod a container in a restricted namespace")
		Expect(kubectl("get", "namespace", namespace, "-o", `jsonpath={.metadata.labels.pod-security\.kubernetes\.io/enforce}`)).To(Equal("restricted"))
		Eventually(func() (string, error) {
			return tryKubectl("rollout", "status", "deployment/"+managerDeployment, "-n", namespace, "--timeout=10s")
		}).WithTimeout(3 * time.Minute).Should(ContainSubstring("successfully rolled out"))
		Expect(kubectl("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=manager",
			"-o", `jsonpath={.items[0].spec.containers[0].image} {.items[0].status.containerStatuses[0].ready} {.items[0].status.containerStatuses[0].containerID}`)).
			To(MatchRegexp(`^` + workerImage + ` true containerd://[0-9a-f]{64}$`))

		By("importing a Session the deployed manager reconciles")
		const name = "deployed"
		importSample(name)
		expectSessionShows(name, map[string]string{"HEAD": "22", "TURNS": "4", "DEGRADED": "1"})
	})
})
