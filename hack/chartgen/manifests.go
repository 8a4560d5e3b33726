package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// object is one Kubernetes manifest as YAML decodes it.
type object = map[string]any

// kustomizeBuild builds dir (relative to root) with the kustomize pinned in
// hack/tools, exactly as make build-installer does.
func kustomizeBuild(root, dir string) ([]object, error) {
	cmd := exec.Command("go", "tool", "-modfile="+filepath.Join(root, "hack", "tools", "go.mod"), "kustomize", "build", filepath.Join(root, dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %v\n%s", dir, err, stderr.Bytes())
	}
	return parseObjects(out)
}

// readObjects reads the manifests of one file.
func readObjects(path string) ([]object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseObjects(data)
}

var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// parseObjects splits a YAML stream into objects, skipping documents that
// hold only comments (helm template heads each with "# Source: ...").
func parseObjects(data []byte) ([]object, error) {
	var objects []object
	for _, doc := range documentSeparator.Split(string(data), -1) {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			return nil, fmt.Errorf("%w in:\n%s", err, doc)
		}
		if o != nil {
			objects = append(objects, o)
		}
	}
	return objects, nil
}

// field walks o along keys, returning nil where a key is missing.
func field(o object, keys ...string) any {
	var v any = o
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// str is the string at keys, "" if there is none.
func str(o object, keys ...string) string {
	s, _ := field(o, keys...).(string)
	return s
}

// objectKey names an object by kind, namespace and name.
func objectKey(o object) string {
	return strings.Join([]string{str(o, "kind"), str(o, "metadata", "namespace"), str(o, "metadata", "name")}, "/")
}
