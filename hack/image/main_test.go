package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRepositoryDockerfile: the Dockerfile users build with Docker is one
// this command follows, and the image it describes is nonroot 65532 with
// the turnlog binary as entrypoint.
func TestRepositoryDockerfile(t *testing.T) {
	stages, err := parse(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 {
		t.Fatalf("%d stages, want 2", len(stages))
	}
	img, err := finalStage("Dockerfile", stages[1], stages[0].name, "/nonexistent")
	if err != nil {
		t.Fatal(err)
	}
	if img.User != "65532:65532" || strings.Join(img.Entrypoint, " ") != "/turnlog" {
		t.Errorf("user %q entrypoint %q, want 65532:65532 and /turnlog", img.User, img.Entrypoint)
	}
	if last := img.Files[len(img.Files)-1]; last.Path != "/turnlog" || last.Source != "/nonexistent/turnlog" {
		t.Errorf("copied file %+v, want /turnlog from the build stage's /out/turnlog", last)
	}
}

// TestUnsupportedDockerfile: anything this command would not reproduce is
// refused with the Dockerfile's line.
func TestUnsupportedDockerfile(t *testing.T) {
	quiet(t)
	for _, tc := range []struct{ dockerfile, want string }{
		{"FROM golang AS build\nRUN true\nFROM alpine\nENTRYPOINT [\"/x\"]\n", "Dockerfile:3: FROM alpine: only gcr.io/distroless/static:nonroot"},
		{"FROM golang AS build\nRUN true\nFROM gcr.io/distroless/static:nonroot\nENV A=b\n", "Dockerfile:4: ENV is not supported in the final stage"},
		{"FROM golang AS build\nRUN true\nFROM gcr.io/distroless/static:nonroot\nENTRYPOINT /x\n", "Dockerfile:4: ENTRYPOINT /x: want the JSON (exec) form"},
		{"FROM golang AS build\nEXPOSE 80\nFROM gcr.io/distroless/static:nonroot\n", "Dockerfile:2: EXPOSE is not supported in the build stage"},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, "Dockerfile")
		if err := os.WriteFile(path, []byte(tc.dockerfile), 0o644); err != nil {
			t.Fatal(err)
		}
		err := build(path, "example.com/x:1", filepath.Join(dir, "x.tar"), nil, "")
		if err == nil || !strings.Contains(err.Error(), strings.Replace(tc.want, "Dockerfile", path, 1)) {
			t.Errorf("%q: error %v, want %q", tc.dockerfile, err, tc.want)
		}
	}
}

// TestRepositoryDockerfileContext: the build stage of the repository's
// Dockerfile sees exactly go.mod, go.sum and the directories its COPY lines
// name, under its WORKDIR, and that is enough for every package
// cmd/turnlog imports: a package directory the COPY lines miss fails here
// (and `docker build`), not only in a Docker engine.
func TestRepositoryDockerfileContext(t *testing.T) {
	repo := filepath.Join("..", "..")
	dockerfile := filepath.Join(repo, "Dockerfile")
	stages, err := parse(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	var workdir string
	err = walkBuildStage(dockerfile, stages[0], root, func(_ instruction, wd string) error {
		workdir = wd
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if workdir != "/src" {
		t.Fatalf("RUN steps run in %q, want /src", workdir)
	}

	want := []string{"/src/go.mod", "/src/go.sum"}
	for _, dir := range []string{"agenthost", "api", "cmd", "controllers", "internal"} {
		for _, f := range files(t, filepath.Join(repo, dir)) {
			want = append(want, "/src/"+dir+f)
		}
	}
	slices.Sort(want)
	if got := files(t, root); !slices.Equal(got, want) {
		t.Errorf("staged build context differs from the COPY lines':\n only staged: %q\n not staged: %q", minus(got, want), minus(want, got))
	}

	list := exec.Command("go", "list", "-deps", "./cmd/turnlog")
	list.Dir = stagePath(root, workdir)
	var stderr strings.Builder
	list.Stderr = &stderr
	if err := list.Run(); err != nil {
		t.Fatalf("go list -deps ./cmd/turnlog in the staged context: %s", diagnose(err, stderr.String(), moduleOf(list.Dir)))
	}
}

// TestMissingCopy: a build stage whose COPY lines leave out a package the
// build needs fails, with one line naming the package and its directory;
// with the COPY added, the same context builds.
func TestMissingCopy(t *testing.T) {
	quiet(t)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":           "module example.com/m\n\ngo 1.22\n",
		"go.sum":           "",
		"cmd/x/main.go":    "package main\n\nimport \"example.com/m/lib\"\n\nfunc main() { lib.F() }\n",
		"lib/lib.go":       "package lib\n\nfunc F() {}\n",
		"notcopied/README": "not part of the build stage\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dockerfile := func(copies string) string {
		return "FROM golang AS build\nWORKDIR /src\nCOPY go.mod go.sum ./\nRUN go mod download\n" + copies +
			"RUN CGO_ENABLED=0 go build -trimpath -o /out/x ./cmd/x\n" +
			"FROM gcr.io/distroless/static:nonroot\nCOPY --from=build /out/x /x\nENTRYPOINT [\"/x\"]\n"
	}
	path := filepath.Join(dir, "Dockerfile")
	archive := filepath.Join(t.TempDir(), "x.tar")

	if err := os.WriteFile(path, []byte(dockerfile("COPY cmd/ cmd/\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	err := build(path, "example.com/x:1", archive, nil, "")
	want := path + ":6: RUN CGO_ENABLED=0 go build -trimpath -o /out/x ./cmd/x: " +
		"package example.com/m/lib (imported at cmd/x/main.go:3:8) is not in the build context: no COPY line brings in lib/"
	if err == nil || err.Error() != want {
		t.Errorf("without COPY lib/: error %v,\nwant %s", err, want)
	}

	if err := os.WriteFile(path, []byte(dockerfile("COPY cmd/ cmd/\nCOPY lib/ lib/\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := build(path, "example.com/x:1", archive, nil, ""); err != nil {
		t.Fatalf("with COPY lib/: %v", err)
	}
	if _, err := os.Stat(archive); err != nil {
		t.Error(err)
	}
}

// TestCopySemantics: COPY places files as Docker does and refuses what
// Docker would.
func TestCopySemantics(t *testing.T) {
	context := t.TempDir()
	for _, name := range []string{"a.txt", "b.txt", "d/e/f.txt"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(context, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(context, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		argument string
		want     []string
		err      string
	}{
		{"a.txt b.txt ./", []string{"/w/a.txt", "/w/b.txt"}, ""},
		{"a.txt renamed", []string{"/w/renamed"}, ""},
		{"d/ d/", []string{"/w/d/e/f.txt"}, ""},
		{"d /abs/", []string{"/abs/e/f.txt"}, ""},
		{`["*.txt", "t/"]`, []string{"/w/t/a.txt", "/w/t/b.txt"}, ""},
		{"a.txt b.txt t", nil, "must end with /"},
		{"missing/ missing/", nil, "missing/: not found in the build context"},
		{"../x ./", nil, "../x is outside the build context"},
		{"--chown=1:1 a.txt ./", nil, "--chown=1:1 is not supported"},
	} {
		root := t.TempDir()
		err := copyStep(context, root, "/w", tc.argument)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("COPY %s: error %v, want %q", tc.argument, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("COPY %s: %v", tc.argument, err)
			continue
		}
		if got := files(t, root); !slices.Equal(got, tc.want) {
			t.Errorf("COPY %s: %q, want %q", tc.argument, got, tc.want)
		}
	}
}

// quiet sends the build stage's progress to the test's output, shown only
// with -v or on failure.
func quiet(t *testing.T) {
	progress = t.Output()
	t.Cleanup(func() { progress = os.Stderr })
}

// files lists the regular files and symbolic links under dir, as sorted
// slash paths relative to it with a leading slash.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		out = append(out, "/"+filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// minus is what a has and b has not.
func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}
