package turnlogtest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubernetesVersion is the control plane turnlog is tested against, the one
// turnlog's `make control-plane` (hack/controlplane.sh) builds; a directory
// of that version is preferred over newer ones.
const KubernetesVersion = "1.37.2"

// controlPlaneBinaries are what envtest starts; kubectl is optional.
var controlPlaneBinaries = []string{"kube-apiserver", "etcd"}

// findControlPlane returns the directory holding the control-plane
// binaries: dir if given; else $KUBEBUILDER_ASSETS, as setup-envtest
// exports it; else hack/controlplane.sh's $CONTROL_PLANE_DIR; else, in
// $ENVTEST_ROOT/k8s (hack/controlplane.sh) and in setup-envtest's own
// directory, KubernetesVersion for this platform or the newest version
// there is. An explicit directory (dir or an environment variable) that
// lacks a binary is an error rather than a reason to look elsewhere: a
// test must not silently run on another control plane than the one asked
// for.
func findControlPlane(dir string) (string, error) {
	for _, explicit := range []struct{ name, dir string }{
		{"WithControlPlane", dir},
		{"$KUBEBUILDER_ASSETS", os.Getenv("KUBEBUILDER_ASSETS")},
		{"$CONTROL_PLANE_DIR", os.Getenv("CONTROL_PLANE_DIR")},
	} {
		if explicit.dir == "" {
			continue
		}
		if missing := missingBinaries(explicit.dir); missing != "" {
			return "", fmt.Errorf("turnlogtest: no %s in %s (%s): %s", missing, explicit.dir, explicit.name, getOne)
		}
		return explicit.dir, nil
	}

	var roots []string
	if root := os.Getenv("ENVTEST_ROOT"); root != "" {
		roots = append(roots, filepath.Join(root, "k8s"))
	}
	if root, err := envtest.SetupEnvtestDefaultBinaryAssetsDirectory(); err == nil && !slices.Contains(roots, root) {
		roots = append(roots, root)
	}
	platform := runtime.GOOS + "-" + runtime.GOARCH
	var looked []string
	for _, root := range roots {
		pinned := filepath.Join(root, KubernetesVersion+"-"+platform)
		if missingBinaries(pinned) == "" {
			return pinned, nil
		}
		if newest := newestIn(root, platform); newest != "" {
			return newest, nil
		}
		looked = append(looked, filepath.Join(root, "*-"+platform))
	}
	if len(looked) == 0 {
		looked = append(looked, "setup-envtest's directory (no $HOME or $XDG_DATA_HOME)")
	}
	return "", fmt.Errorf("turnlogtest: no control plane (kube-apiserver, etcd) found: $KUBEBUILDER_ASSETS is unset and none in %s: %s",
		strings.Join(looked, ", "), getOne)
}

// getOne says how to get a control plane, in one line.
const getOne = "install one with `setup-envtest use " + KubernetesVersion + "` (sigs.k8s.io/controller-runtime/tools/setup-envtest) " +
	"or turnlog's `make control-plane`, or set KUBEBUILDER_ASSETS to a directory holding kube-apiserver and etcd"

// missingBinaries names the binaries envtest needs that dir lacks, or "".
func missingBinaries(dir string) string {
	var missing []string
	for _, b := range controlPlaneBinaries {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
			missing = append(missing, b)
		}
	}
	return strings.Join(missing, ", ")
}

// newestIn returns the directory of root, named <version>-<platform> as
// setup-envtest names them, of the newest version that has the binaries.
func newestIn(root, platform string) string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return ""
	}
	var best *version.Version
	bestDir := ""
	for _, e := range entries {
		v, ok := strings.CutSuffix(e.Name(), "-"+platform)
		if !ok || !e.IsDir() {
			continue
		}
		parsed, err := version.ParseSemantic(v)
		if err != nil || (best != nil && !parsed.GreaterThan(best)) {
			continue
		}
		if dir := filepath.Join(root, e.Name()); missingBinaries(dir) == "" {
			best, bestDir = parsed, dir
		}
	}
	return bestDir
}
