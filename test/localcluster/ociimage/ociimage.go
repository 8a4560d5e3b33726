// Package ociimage builds container images from local files, without a
// Docker engine or a registry, and writes them as OCI image archives (an OCI
// image layout in a tar file) that `ctr images import` loads. The local
// cluster's real node runs them, and `make image` builds the deployable
// turnlog image with it from the Dockerfile's recipe (hack/image).
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of an image's filesystem. A directory has a Path ending
// in "/"; otherwise it is a regular file whose content is Data or, if
// Source is set, the content of that local file.
type File struct {
	Path     string // absolute, e.g. "/turnlog" or "/tmp/"
	Mode     int64  // permission bits, e.g. 0o755 or 0o1777
	UID, GID int
	Data     []byte
	Source   string
}

// Image is what an archive holds: one single-layer image for linux on this
// machine's architecture.
type Image struct {
	// Ref names the image, e.g. "ghcr.io/turnlog/turnlog:dev"; ctr imports
	// it under this name.
	Ref        string
	Files      []File
	User       string // e.g. "65532:65532"
	Entrypoint []string
	Cmd        []string
	Env        []string
}

// epoch is every file's and the image's creation time, so that the same
// files always give the same image digest.
var epoch = time.Unix(0, 0).UTC()

// Write builds img and writes it to archivePath as an OCI image layout tar.
func Write(archivePath string, img Image) error {
	ref, err := name.ParseReference(img.Ref, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("image %q: %w", img.Ref, err)
	}
	layerTar, err := layerTar(img.Files)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	withLayer, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "ociimage"},
	})
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	cfg, err := withLayer.ConfigFile()
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.User = img.User
	cfg.Config.Entrypoint = img.Entrypoint
	cfg.Config.Cmd = img.Cmd
	cfg.Config.Env = img.Env
	final, err := mutate.ConfigFile(withLayer, cfg)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	return writeLayout(archivePath, containerdName(ref), final)
}

// containerdName is ref as containerd and the kubelet name it: Docker Hub's
// images as docker.io/library/NAME:TAG, so that a pod's `image: turnlog:e2e`
// finds the imported image.
func containerdName(ref name.Reference) string {
	repo := ref.Context()
	registry := repo.RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io"
	}
	sep := ":"
	if _, ok := ref.(name.Digest); ok {
		sep = "@"
	}
	return registry + "/" + repo.RepositoryStr() + sep + ref.Identifier()
}

// layerTar is the uncompressed layer: the files sorted by path, with the
// parent directories they need.
func layerTar(files []File) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("file %q: path must be absolute", f.Path)
		}
		byPath[f.Path] = f
		for dir := path.Dir(strings.TrimSuffix(f.Path, "/")); dir != "/"; dir = path.Dir(dir) {
			if _, ok := byPath[dir+"/"]; !ok {
				byPath[dir+"/"] = File{Path: dir + "/", Mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		hdr := &tar.Header{
			Name: strings.TrimPrefix(p, "/"), Mode: f.Mode, Uid: f.UID, Gid: f.GID,
			ModTime: epoch, Format: tar.FormatPAX,
		}
		data := f.Data
		if strings.HasSuffix(p, "/") {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag = tar.TypeReg
			if f.Source != "" {
				var err error
				if data, err = os.ReadFile(f.Source); err != nil {
					return nil, fmt.Errorf("file %s: %w", p, err)
				}
			}
			hdr.Size = int64(len(data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeLayout writes an OCI image layout holding img, named ref, as a tar
// file: oci-layout, index.json and the blobs.
func writeLayout(archivePath, ref string, img v1.Image) (err error) {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	desc, err := partialDescriptor(img, manifest)
	if err != nil {
		return err
	}
	// containerd names an imported image by io.containerd.image.name;
	// other tools read the OCI ref name.
	desc.Annotations = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref,
	}
	index, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{desc}})
	if err != nil {
		return err
	}
	out, err := os.Create(archivePath)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(out)
	add := func(name string, r io.Reader, size int64) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	addBytes := func(name string, b []byte) error { return add(name, bytes.NewReader(b), int64(len(b))) }
	if err := addBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := addBytes("index.json", index); err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	if err := addBytes("blobs/sha256/"+desc.Digest.Hex, manifest); err != nil {
		return err
	}
	if err := addBytes("blobs/sha256/"+cfgName.Hex, config); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		digest, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		err = add("blobs/sha256/"+digest.Hex, rc, size)
		rc.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

func partialDescriptor(img v1.Image, manifest []byte) (v1.Descriptor, error) {
	digest, size, err := v1.SHA256(bytes.NewReader(manifest))
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{
		MediaType: mt, Digest: digest, Size: size,
		Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
	}, nil
}

// NonrootBase is a distroless-style base (as gcr.io/distroless/static:nonroot):
// users root, nobody and nonroot (65532) in /etc/passwd and /etc/group, a
// world-writable /tmp, nonroot's home, and the host's CA certificates when
// it has them, so a static binary can reach TLS endpoints.
func NonrootBase() []File {
	files := []File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{Path: "/tmp/", Mode: 0o1777},
		{Path: "/home/nonroot/", Mode: 0o700, UID: 65532, GID: 65532},
	}
	const caBundle = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(caBundle); err == nil {
		files = append(files, File{Path: caBundle, Mode: 0o644, Source: caBundle})
	}
	return files
}
