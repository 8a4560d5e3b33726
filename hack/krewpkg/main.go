// Command krewpkg packages kubectl-turnlog for krew, kubectl's plugin
// manager: an archive per platform (the plugin's binary, built with
// CGO_ENABLED=0) and the krew manifest that lists them with their sha256,
// as a krew index or `kubectl krew install --manifest` reads it.
//
//	go run ./hack/krewpkg --out dist/krew [--version v0.1.0] [--platforms linux/amd64,darwin/arm64]
//
// The archives are byte-for-byte reproducible (fixed times and owners in
// the tar headers, -trimpath), so the manifest's sha256 is the release's.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/template"
	"time"
)

// allPlatforms are the platforms a release packages.
const allPlatforms = "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64"

func main() {
	out := flag.String("out", "dist/krew", "directory for the archives and turnlog.yaml")
	version := flag.String("version", "v0.1.0", "the plugin's version, as krew shows it (a v-prefixed semantic version)")
	platforms := flag.String("platforms", allPlatforms, `comma-separated GOOS/GOARCH pairs; "host" for this machine's`)
	baseURL := flag.String("base-url", "https://github.com/turnlog/turnlog/releases/download", "where the release's archives are downloaded from: <base-url>/<version>/<archive>")
	flag.Parse()
	if *platforms == "host" {
		*platforms = runtime.GOOS + "/" + runtime.GOARCH
	}
	if err := run(*out, *version, *baseURL, strings.Split(*platforms, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "krewpkg:", err)
		os.Exit(1)
	}
}

// platform is one archive of the manifest.
type platform struct {
	OS, Arch, Archive, SHA256, URI, Bin string
}

func run(out, version, baseURL string, platforms []string) error {
	if !strings.HasPrefix(version, "v") {
		return fmt.Errorf("--version %q: krew wants a v-prefixed semantic version such as v0.1.0", version)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var listed []platform
	for _, p := range platforms {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || goos == "" || goarch == "" {
			return fmt.Errorf("--platforms: %q is not GOOS/GOARCH", p)
		}
		pl, err := pack(out, version, baseURL, goos, goarch)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", goos, goarch, err)
		}
		listed = append(listed, pl)
	}
	var manifest bytes.Buffer
	if err := manifestTemplate.Execute(&manifest, map[string]any{"Version": version, "Platforms": listed}); err != nil {
		return err
	}
	path := filepath.Join(out, "turnlog.yaml")
	if err := os.WriteFile(path, manifest.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}

// pack builds the plugin for one platform and archives it.
func pack(out, version, baseURL, goos, goarch string) (platform, error) {
	bin := "kubectl-turnlog"
	if goos == "windows" {
		bin += ".exe"
	}
	tmp, err := os.MkdirTemp("", "krewpkg-")
	if err != nil {
		return platform{}, err
	}
	defer os.RemoveAll(tmp)
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(tmp, bin), "./cmd/kubectl-turnlog")
	build.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return platform{}, fmt.Errorf("go build: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(tmp, bin))
	if err != nil {
		return platform{}, err
	}
	archive := fmt.Sprintf("kubectl-turnlog_%s_%s.tar.gz", goos, goarch)
	tgz, err := tarGz(bin, data)
	if err != nil {
		return platform{}, err
	}
	if err := os.WriteFile(filepath.Join(out, archive), tgz, 0o644); err != nil {
		return platform{}, err
	}
	sum := sha256.Sum256(tgz)
	fmt.Printf("built %s (%d bytes)\n", filepath.Join(out, archive), len(tgz))
	return platform{OS: goos, Arch: goarch, Archive: archive, SHA256: hex.EncodeToString(sum[:]),
		URI: fmt.Sprintf("%s/%s/%s", strings.TrimSuffix(baseURL, "/"), version, archive), Bin: bin}, nil
}

// tarGz is a gzipped tar of one executable, the same bytes every time.
func tarGz(name string, data []byte) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	hdr := &tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0).UTC(), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var manifestTemplate = template.Must(template.New("turnlog.yaml").Parse(`apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: turnlog
spec:
  version: {{.Version}}
  homepage: https://github.com/turnlog/turnlog
  shortDescription: List, inspect and fork turnlog agent Sessions
  description: |
    kubectl turnlog reads turnlog's Sessions and SessionForks: the Sessions
    of a namespace with their replay state, a Session's fork points (its
    turns, where a fork would cut), its transcript and Events, and forks a
    Session at a turn by creating a SessionFork. It uses your kubeconfig and
    the store credentials you pass, nothing in the cluster beyond what
    kubectl can read.
  platforms:
{{- range .Platforms}}
  - selector:
      matchLabels:
        os: {{.OS}}
        arch: {{.Arch}}
    uri: {{.URI}}
    sha256: {{.SHA256}}
    bin: {{.Bin}}
    files:
    - from: {{.Bin}}
      to: .
{{- end}}
`))
