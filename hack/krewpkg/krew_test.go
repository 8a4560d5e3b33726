package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/testutil/controlplane"
)

// TestKrewInstallsThePlugin: the archive and manifest krewpkg writes for
// this machine pass krew's own manifest validation, `kubectl krew install
// --manifest --archive` (krew v0.4.3, pinned in hack/krew) installs them,
// and the real kubectl then finds `kubectl turnlog` on the PATH krew
// documents. A manifest whose sha256 does not match its archive is
// refused.
func TestKrewInstallsThePlugin(t *testing.T) {
	kubectl := filepath.Join(controlplane.Assets(), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no kubectl in %s (run `make control-plane`): %v", controlplane.Assets(), err)
		}
		t.Skipf("no kubectl in %s: run `make control-plane`", controlplane.Assets())
	}
	tools := t.TempDir()
	build := exec.Command("go", "build", "-o", tools, "sigs.k8s.io/krew/cmd/krew", "sigs.k8s.io/krew/cmd/validate-krew-manifest")
	build.Dir = filepath.Join("..", "krew")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build krew: %v\n%s", err, out)
	}
	if err := os.Rename(filepath.Join(tools, "krew"), filepath.Join(tools, "kubectl-krew")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(kubectl, filepath.Join(tools, "kubectl")); err != nil {
		t.Fatal(err)
	}

	out := t.TempDir()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root) // krewpkg builds ./cmd/kubectl-turnlog
	if err := run(out, "v0.1.0", "https://example.com/releases", []string{runtime.GOOS + "/" + runtime.GOARCH}); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(out, "turnlog.yaml")
	archive := filepath.Join(out, "kubectl-turnlog_"+runtime.GOOS+"_"+runtime.GOARCH+".tar.gz")

	krewRoot := t.TempDir()
	path := filepath.Join(krewRoot, "bin") + string(os.PathListSeparator) + tools + string(os.PathListSeparator) + os.Getenv("PATH")
	cmd := func(name string, args ...string) (string, error) {
		c := exec.Command(name, args...)
		c.Env = append(os.Environ(), "KREW_ROOT="+krewRoot, "PATH="+path, "HOME="+t.TempDir())
		var b bytes.Buffer
		c.Stdout, c.Stderr = &b, &b
		err := c.Run()
		return b.String(), err
	}
	if out, err := cmd(filepath.Join(tools, "validate-krew-manifest"), "-manifest", manifest, "-skip-install"); err != nil {
		t.Fatalf("validate-krew-manifest: %v\n%s", err, out)
	}

	// A manifest that does not match its archive is refused.
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "turnlog.yaml")
	sum := strings.SplitN(strings.SplitN(string(data), "sha256: ", 2)[1], "\n", 2)[0]
	if err := os.WriteFile(bad, []byte(strings.Replace(string(data), sum, strings.Repeat("a", 64), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cmd(kubectl, "krew", "install", "--manifest="+bad, "--archive="+archive); err == nil || !strings.Contains(out, "checksum") {
		t.Fatalf("krew installed an archive whose sha256 the manifest does not name (%v):\n%s", err, out)
	}

	if out, err := cmd(kubectl, "krew", "install", "--manifest="+manifest, "--archive="+archive); err != nil {
		t.Fatalf("kubectl krew install: %v\n%s", err, out)
	}
	list, err := cmd(kubectl, "plugin", "list")
	if want := filepath.Join(krewRoot, "bin", "kubectl-turnlog"); !strings.Contains(list, want) {
		t.Fatalf("kubectl plugin list does not show %s (%v):\n%s", want, err, list)
	}
	help, err := cmd(kubectl, "turnlog", "--help")
	if err != nil || !strings.Contains(help, "kubectl turnlog answers questions about turnlog Sessions") {
		t.Fatalf("kubectl turnlog --help: %v\n%s", err, help)
	}
}
