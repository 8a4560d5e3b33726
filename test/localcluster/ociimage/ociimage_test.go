package ociimage

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// TestWriteReadsBackAsOCILayout writes an image and reads the archive back
// as an OCI layout: the name containerd imports it under, its config and
// its files are what was asked for.
func TestWriteReadsBackAsOCILayout(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "image.tar")
	err := Write(archive, Image{
		Ref:        "turnlog:e2e",
		Files:      append(NonrootBase(), File{Path: "/app", Mode: 0o755, Source: bin}),
		User:       "65532:65532",
		Entrypoint: []string{"/app"},
	})
	if err != nil {
		t.Fatal(err)
	}
	layoutDir := filepath.Join(dir, "layout")
	untar(t, archive, layoutDir)
	index, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(manifest.Manifests))
	}
	desc := manifest.Manifests[0]
	if got := desc.Annotations["io.containerd.image.name"]; got != "docker.io/library/turnlog:e2e" {
		t.Errorf("containerd name %q, want docker.io/library/turnlog:e2e (as a pod's image: turnlog:e2e resolves)", got)
	}
	img, err := index.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/app" || cfg.OS != "linux" {
		t.Errorf("config user %q entrypoint %q os %q", cfg.Config.User, cfg.Config.Entrypoint, cfg.OS)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	modes := map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		modes[h.Name] = h.Mode
	}
	for name, mode := range map[string]int64{"app": 0o755, "etc/passwd": 0o644, "tmp/": 0o1777, "home/nonroot/": 0o700} {
		if got, ok := modes[name]; !ok || got != mode {
			t.Errorf("layer entry %s: mode %o (present %v), want %o", name, got, ok, mode)
		}
	}
}

// TestWriteIsReproducible: the same files give the same archive, so a
// rebuilt image that did not change is not a new image.
func TestWriteIsReproducible(t *testing.T) {
	dir := t.TempDir()
	var archives [2][]byte
	for i := range archives {
		p := filepath.Join(dir, "image.tar")
		if err := Write(p, Image{Ref: "example.com/a:1", Files: []File{{Path: "/a", Mode: 0o755, Data: []byte("x")}}, Entrypoint: []string{"/a"}}); err != nil {
			t.Fatal(err)
		}
		var err error
		if archives[i], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	if string(archives[0]) != string(archives[1]) {
		t.Error("two writes of the same image differ")
	}
}

func untar(t *testing.T, archive, dest string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dest, h.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
