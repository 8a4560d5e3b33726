// Package e2ebuild builds what the end-to-end suite runs: the turnlog
// binary, ./test/e2e/workerprobe, and for the container node the worker
// images from the Dockerfile's recipe (hack/image). `make test-e2e` builds
// them before the suite starts (hack/e2ebuild), so that a slow machine
// makes the build slower, never the suite's start time out; a suite run
// without them builds them itself.
package e2ebuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The worker images. WorkerImage is the deployable image itself; the
// others add ./test/e2e/workerprobe as their entrypoint. The slow one
// reports what the runtime enforces and sleeps before it runs the worker,
// so that a spec can act while a worker pod is Running; the OOM one takes
// a run and allocates memory until it is killed; the slow-runs one holds
// each run it takes for a while before it does it, so that a spec can act
// while a worker pod holds a run.
const (
	WorkerImage         = "turnlog:e2e"
	SlowWorkerImage     = "turnlog:e2e-slow"
	OOMWorkerImage      = "turnlog:e2e-oom"
	SlowRunsWorkerImage = "turnlog:e2e-slow-runs"
)

// Artifacts are the built files, by path.
type Artifacts struct {
	// Turnlog is the CLI and manager binary.
	Turnlog string
	// Workerprobe is ./test/e2e/workerprobe, for the process node (the
	// container node's images hold it).
	Workerprobe string
	// ImageArchives are OCI archives of the worker images, for the
	// container node; empty when built without images.
	ImageArchives []string
}

// images lists each image with what hack/image is given beside its ref.
func images(probe string) []struct {
	ref   string
	extra []string
} {
	return []struct {
		ref   string
		extra []string
	}{
		{WorkerImage, nil},
		{SlowWorkerImage, []string{"--add", probe + ":/workerprobe", "--entrypoint", `["/workerprobe"]`}},
		{OOMWorkerImage, []string{"--add", probe + ":/workerprobe", "--entrypoint", `["/workerprobe","--oom"]`}},
		{SlowRunsWorkerImage, []string{"--add", probe + ":/workerprobe", "--entrypoint", `["/workerprobe","--slow-runs"]`}},
	}
}

// archiveName is the file an image's archive is written to in a directory.
func archiveName(ref string) string {
	return strings.NewReplacer(":", "_", "/", "_").Replace(ref) + ".tar"
}

// Paths names the artifacts Build writes into dir.
func Paths(dir string, withImages bool) Artifacts {
	a := Artifacts{Turnlog: filepath.Join(dir, "turnlog"), Workerprobe: filepath.Join(dir, "workerprobe")}
	if withImages {
		for _, img := range images("") {
			a.ImageArchives = append(a.ImageArchives, filepath.Join(dir, archiveName(img.ref)))
		}
	}
	return a
}

// Build builds the artifacts into dir from the repository at root.
func Build(ctx context.Context, root, dir string, withImages bool) (Artifacts, error) {
	a := Paths(dir, withImages)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return a, err
	}
	if err := goCmd(ctx, root, nil, "build", "-o", a.Turnlog, "./cmd/turnlog"); err != nil {
		return a, err
	}
	if err := goCmd(ctx, root, []string{"CGO_ENABLED=0"}, "build", "-o", a.Workerprobe, "./test/e2e/workerprobe"); err != nil {
		return a, err
	}
	if !withImages {
		return a, nil
	}
	for i, img := range images(a.Workerprobe) {
		args := append([]string{"run", "./hack/image", "--ref", img.ref, "--out", a.ImageArchives[i]}, img.extra...)
		if err := goCmd(ctx, root, nil, args...); err != nil {
			return a, err
		}
	}
	return a, nil
}

// Check reports the first artifact missing from dir.
func Check(dir string, withImages bool) (Artifacts, error) {
	a := Paths(dir, withImages)
	for _, f := range append([]string{a.Turnlog, a.Workerprobe}, a.ImageArchives...) {
		if _, err := os.Stat(f); err != nil {
			return a, fmt.Errorf("%s is not built (make e2e-build E2E_BUILD_DIR=%s): %w", f, dir, err)
		}
	}
	return a, nil
}

func goCmd(ctx context.Context, root string, extraEnv []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), extraEnv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
