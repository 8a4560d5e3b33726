package main

import (
	"os"
	"path/filepath"
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
