package pirecord

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/turnlog/turnlog/test/internal/pihost"
)

// TestPackageTypeChecks: pi loads the package's TypeScript without checking
// it; this checks it, strictly, against pi 1.6.0's own declarations.
func TestPackageTypeChecks(t *testing.T) {
	node, _, pkg := pihost.Paths(t)
	tsc := filepath.Join(pkg, "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		t.Fatalf("typescript is not installed in %s (run `make pi-deps`): %v", pkg, err)
	}
	cmd := exec.Command(node, tsc, "-p", pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tsc: %v\n%s", err, out)
	}
}
