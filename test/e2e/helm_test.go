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
	"sigs.k8s.io/yaml"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// The Helm path: `helm install` of charts/turnlog, with helm itself (the
// version pinned in hack/helm), gives the same running manager as the
// one-file install — a container under the restricted Pod Security
// Standard that reconciles a Session and a fork — `helm upgrade` with new
// values rolls it out with them, `helm upgrade` to `shards: 3` moves an
// install with Sessions to three managers by the procedure of
// docs/scaling.md, and `helm uninstall` removes it again. The specs share
// one install, in this order.
var _ = Describe("the Helm chart installed with helm (container node)", Ordered, func() {
	const namespace, release, releaseNamespace = "turnlog-system", "turnlog", "default"
	var (
		h          helmCLI
		valuesFile string
		image      map[string]any
	)

	BeforeAll(func(ctx SpecContext) {
		m := needContainerNode()
		h = newHelm()
		repository, tag, _ := strings.Cut(workerImage, ":")
		image = map[string]any{"repository": repository, "tag": tag}
		valuesFile = installChart(ctx, m, h, release, releaseNamespace, image)
	})

	It("runs the manager as a container under the restricted Pod Security Standard and reconciles a Session and a fork", func() {
		By("seeing the manager Deployment available, its pod a container in a restricted namespace")
		expectManagerContainerRunning(namespace)
		Expect(kubectl("get", "deployment", managerDeployment, "-n", namespace, "-o", `jsonpath={.metadata.labels.app\.kubernetes\.io/managed-by}`)).
			To(Equal("Helm"))

		expectDeployedManagerReconciles(namespace, "helm-installed")
	})

	It("upgrades with new values: the manager rolls out with them and goes on reconciling", func() {
		upgraded, err := yaml.Marshal(map[string]any{
			"image":     image,
			"stores":    "default " + env.storeURL + "\n",
			"limits":    map[string]any{"namespaceWorkerRuns": 2},
			"extraArgs": []string{"--poll-interval=45s"},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(valuesFile, upgraded, 0o644)).To(Succeed())
		h.run("upgrade", release, h.chart, "-n", releaseNamespace, "-f", valuesFile)
		Expect(h.run("status", release, "-n", releaseNamespace)).To(And(ContainSubstring("STATUS: deployed"), ContainSubstring("REVISION: 2")))
		Eventually(func() (string, error) {
			return tryKubectl("rollout", "status", "deployment/"+managerDeployment, "-n", namespace, "--timeout=10s")
		}).WithTimeout(3 * time.Minute).Should(ContainSubstring("successfully rolled out"))
		// One manager pod, the new one, running with the new flags.
		Eventually(func() (string, error) {
			return tryKubectl("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=manager",
				"-o", `jsonpath={range .items[*]}{.spec.containers[0].args}{"\n"}{end}`)
		}).WithTimeout(3 * time.Minute).Should(And(
			MatchRegexp(`^[^\n]*--namespace-worker-runs=2[^\n]*\n$`), ContainSubstring("--poll-interval=45s")))
		expectManagerContainerRunning(namespace)
		expectDeployedManagerReconciles(namespace, "helm-upgraded")
	})

	It("upgrades from one manager to three shards by the documented procedure, losing no Session and no append", func(ctx SpecContext) {
		reshardWithHelm(ctx, h, release, releaseNamespace, valuesFile)
	})
})

// installChart stops the suite's manager (started again at the end) and
// installs the chart as release, with values for the suite's image and
// store, which it returns the file of; the release is uninstalled at the
// end.
func installChart(ctx SpecContext, m *localManager, h helmCLI, release, releaseNamespace string, image map[string]any) string {
	GinkgoHelper()
	const namespace = "turnlog-system"
	By("stopping the suite's manager, so the installed one is the only one")
	Expect(m.stop()).To(Succeed())
	DeferCleanup(func() { Expect(m.start(workerImage)).To(Succeed()) })

	By("writing values for the suite's image and store, and creating the credentials Secret")
	values, err := yaml.Marshal(map[string]any{"image": image, "stores": "default " + env.storeURL + "\n"})
	Expect(err).NotTo(HaveOccurred())
	valuesFile := filepath.Join(GinkgoT().TempDir(), "values.yaml")
	Expect(os.WriteFile(valuesFile, values, 0o644)).To(Succeed())
	createStoreCredentials(ctx, namespace)

	By("letting the release take over what exists already: the namespace, the suite's admission policy, a one-file install's objects")
	adoptExisting(h.run("template", release, h.chart, "-f", valuesFile), release, releaseNamespace)

	By("helm lint, then helm install")
	h.run("lint", "--strict", h.chart, "-f", valuesFile)
	// --force-conflicts: the fields of the objects taken over belong to
	// their creators (the suite, kubectl) until Helm's server-side apply
	// takes them.
	h.run("install", release, h.chart, "-n", releaseNamespace, "-f", valuesFile, "--force-conflicts")
	DeferCleanup(func() {
		h.run("uninstall", release, "-n", releaseNamespace)
		expectNoManagerPods(namespace)
		// The shards' managers are gone: so must their worker pods be,
		// which no manager deletes any more.
		kubectlAllNamespaces("delete", "deployments,secrets", "-l", poolWorkerLabel+","+turnlogv1.LabelShard, "--ignore-not-found")
		// The release took the suite's admission policy over, and
		// uninstall deleted it with the namespace: put the policy back,
		// and let the namespace go before another spec creates it.
		kubectl("apply", "-f", filepath.Join(env.root, "config", "admission", "forkedfrom_policy.yaml"))
		Eventually(func() error {
			_, err := tryKubectl("get", "namespace", namespace)
			return err
		}).WithTimeout(3 * time.Minute).Should(MatchError(ContainSubstring("NotFound")))
	})
	Expect(h.run("status", release, "-n", releaseNamespace)).To(ContainSubstring("STATUS: deployed"))
	return valuesFile
}

// helmCLI runs the pinned helm against the suite's cluster, with its
// configuration and cache in a directory of the spec's own.
type helmCLI struct {
	bin, chart string
	env        []string
}

func newHelm() helmCLI {
	GinkgoHelper()
	bin := os.Getenv("HELM")
	if bin == "" {
		bin = filepath.Join(env.root, "bin", "helm")
	}
	_, err := os.Stat(bin)
	Expect(err).NotTo(HaveOccurred(), "no helm: run `make helm` (or set HELM)")
	home := GinkgoT().TempDir()
	return helmCLI{
		bin:   bin,
		chart: filepath.Join(env.root, "charts", "turnlog"),
		env: append(os.Environ(), "KUBECONFIG="+env.kubeconfig,
			"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data")),
	}
}

// run runs helm with args, which must succeed, and returns its stdout.
func (h helmCLI) run(args ...string) string {
	GinkgoHelper()
	cmd := exec.Command(h.bin, args...)
	cmd.Env = h.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "helm %s:\n%s%s", strings.Join(args, " "), out, stderr.String())
	return string(out)
}

var manifestSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// adoptExisting labels and annotates the objects of rendered that exist
// already as Helm's own for release, as an operator does to move an
// install to Helm; Helm refuses to install over objects it does not own.
func adoptExisting(rendered, release, releaseNamespace string) {
	GinkgoHelper()
	for _, doc := range manifestSeparator.Split(rendered, -1) {
		var o struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
		}
		Expect(yaml.Unmarshal([]byte(doc), &o)).To(Succeed())
		if o.Kind == "" {
			continue
		}
		object := []string{strings.ToLower(o.Kind) + "/" + o.Metadata.Name}
		if o.Metadata.Namespace != "" {
			object = append(object, "-n", o.Metadata.Namespace)
		}
		if _, err := tryKubectl(append([]string{"get"}, object...)...); err != nil {
			continue
		}
		kubectl(append(append([]string{"label", "--overwrite"}, object...), "app.kubernetes.io/managed-by=Helm")...)
		kubectl(append(append([]string{"annotate", "--overwrite"}, object...),
			"meta.helm.sh/release-name="+release, "meta.helm.sh/release-namespace="+releaseNamespace)...)
	}
}
