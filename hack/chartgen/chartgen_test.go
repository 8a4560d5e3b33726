package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	root     = "../.."
	chartDir = root + "/charts/turnlog"
)

// TestChartIsGenerated: the committed chart is what config/ generates, so
// a change to config/ the chart lacks fails here.
func TestChartIsGenerated(t *testing.T) {
	want, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	err = filepath.WalkDir(chartDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chartDir, path)
		got[filepath.ToSlash(rel)], err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range want {
		if !bytes.Equal(got[name], data) {
			t.Errorf("charts/turnlog/%s is not what config/ generates: run `make chart` and commit the result", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("charts/turnlog/%s is no longer generated from config/: run `make chart` and commit the result", name)
		}
	}
}

// TestChartRendersConfig: helm lint passes, and helm template renders, with
// the values that correspond to an overlay, what kustomize builds from it,
// apart from the labels Helm adds.
func TestChartRendersConfig(t *testing.T) {
	helm := helmBinary(t)
	lint := exec.Command(helm, "lint", "--strict", chartDir)
	if out, err := lint.CombinedOutput(); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name      string
		overlays  []string
		helmFlags []string
	}{
		{"default values: config/default", []string{"config/default"}, nil},
		{"watchNamespaces: config/namespaced", []string{"config/namespaced"}, []string{"--set", "watchNamespaces={team-a,team-b}"}},
		{"monitoring: config/default and config/prometheus", []string{"config/default", "config/prometheus"},
			[]string{"--set", "monitoring.serviceMonitor=true", "--set", "monitoring.prometheusRule=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []object
			for _, dir := range tc.overlays {
				objects, err := kustomizeBuild(root, dir)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, objects...)
			}
			compareObjects(t, helmTemplate(t, helm, tc.helmFlags...), want)
		})
	}
}

// TestChartValues: the values that have no overlay in config/ reach the
// manager Deployment.
func TestChartValues(t *testing.T) {
	helm := helmBinary(t)
	objects := helmTemplate(t, helm, "--set", "image.repository=registry.example.com/turnlog", "--set", "image.tag=v1",
		"--set", "credentialsSecret=", "--set", "limits.namespaceWorkerRuns=4", "--set", "limits.namespaceReconcileRate=0.5",
		"--set", "extraArgs={--poll-interval=30s}", "--set", "resources.limits.memory=1Gi", "--set-string", "stores=default s3://b?region=eu-west-1\n",
		"--set", "otlp.endpoint=http://collector:4317", "--set", "otlp.protocol=grpc", "--set", "otlp.captureContent=true")
	var manager, stores object
	for _, o := range objects {
		switch objectKey(o) {
		case "Deployment/turnlog-system/turnlog-manager":
			manager = o
		case "ConfigMap/turnlog-system/turnlog-stores":
			stores = o
		}
	}
	c, err := managerContainer(manager)
	if err != nil {
		t.Fatal(err)
	}
	const image = "registry.example.com/turnlog:v1"
	if c["image"] != image || field(c, "env").([]any)[0].(map[string]any)["value"] != image {
		t.Errorf("image %v, env %v: want %s for the manager and its workers", c["image"], c["env"], image)
	}
	args := c["args"].([]any)
	for _, want := range []string{"--namespace-worker-runs=4", "--namespace-reconcile-rate=0.5", "--poll-interval=30s",
		"--otlp-endpoint=http://collector:4317", "--otlp-protocol=grpc", "--otlp-capture-content"} {
		if !slices.Contains(args, any(want)) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	for _, a := range args {
		if strings.HasPrefix(a.(string), credentialsFlag) {
			t.Errorf("args %v name a credentials Secret, with credentialsSecret empty", args)
		}
	}
	if c["envFrom"] != nil {
		t.Errorf("envFrom %v, with credentialsSecret empty", c["envFrom"])
	}
	if got := field(c, "resources", "limits", "memory"); got != "1Gi" {
		t.Errorf("memory limit %v, want 1Gi", got)
	}
	if got := str(stores, "data", "stores"); got != "default s3://b?region=eu-west-1\n" {
		t.Errorf("stores %q", got)
	}
}

// helmBinary is bin/helm (make helm), or HELM; without either it is built
// from hack/helm.
func helmBinary(t *testing.T) string {
	if helm := os.Getenv("HELM"); helm != "" {
		return helm
	}
	helm, err := filepath.Abs(filepath.Join(root, "bin", "helm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(helm); err == nil {
		return helm
	}
	t.Log("no bin/helm (make helm): building it")
	helm = filepath.Join(t.TempDir(), "helm")
	build := exec.Command("go", "build", "-o", helm, "helm.sh/helm/v4/cmd/helm")
	build.Dir = filepath.Join(root, "hack", "helm")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build helm: %v\n%s", err, out)
	}
	return helm
}

// helmTemplate renders the chart, CRDs included, with Helm's labels left
// out.
func helmTemplate(t *testing.T, helm string, flags ...string) []object {
	cmd := exec.Command(helm, append([]string{"template", "turnlog", chartDir, "--include-crds"}, flags...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.Bytes())
	}
	objects, err := parseObjects(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objects {
		dropHelmLabels(o)
	}
	return objects
}

// helmLabels are the labels the chart adds to every object's metadata.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance"}

func dropHelmLabels(o object) {
	meta, _ := o["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	for _, l := range helmLabels {
		delete(labels, l)
	}
	if labels != nil && len(labels) == 0 {
		delete(meta, "labels")
	}
}

// compareObjects reports the objects that are only in got or only in
// want, and those that differ.
func compareObjects(t *testing.T, got, want []object) {
	t.Helper()
	byKey := func(objects []object) map[string]object {
		m := map[string]object{}
		for _, o := range objects {
			if _, dup := m[objectKey(o)]; dup {
				t.Errorf("%s twice", objectKey(o))
			}
			m[objectKey(o)] = o
		}
		return m
	}
	g, w := byKey(got), byKey(want)
	for key, o := range w {
		switch other, ok := g[key]; {
		case !ok:
			t.Errorf("the chart renders no %s", key)
		case !reflect.DeepEqual(o, other):
			t.Errorf("the chart renders %s differently:\n--- chart\n%s--- kustomize\n%s", key, toYAML(other), toYAML(o))
		}
	}
	for key := range g {
		if _, ok := w[key]; !ok {
			t.Errorf("the chart renders %s, which kustomize does not", key)
		}
	}
}

func toYAML(o object) string {
	data, _ := yaml.Marshal(o)
	return string(data)
}

// TestChartShards: shards: 3 renders three manager Deployments, each
// config/default's with its shard's name, label (in its selector too) and
// --shard flag, and config/shards: the admission policies, the list of
// shards the first picks from, and the ClusterRole of the operators who
// move Sessions between shards. Without shards there is one manager and
// none of config/shards (TestChartRendersConfig).
func TestChartShards(t *testing.T) {
	helm := helmBinary(t)
	objects := helmTemplate(t, helm, "--set", "shards=3", "--set", "shardBy=namespace")
	base, err := kustomizeBuild(root, "config/default")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := kustomizeBuild(root, "config/shards")
	if err != nil {
		t.Fatal(err)
	}
	var manager object
	for _, o := range base {
		if objectKey(o) == "Deployment/turnlog-system/turnlog-manager" {
			manager = o
		}
	}
	var want []object
	for _, o := range base {
		if o["kind"] != "Deployment" && o["kind"] != "CustomResourceDefinition" {
			want = append(want, o)
		}
	}
	for _, shard := range []string{"0", "1", "2"} {
		want = append(want, shardManager(t, manager, shard))
	}
	for _, o := range policy {
		if o["kind"] == "ConfigMap" {
			o["data"] = map[string]any{"shards": "0 1 2", "by": "namespace"}
		}
		want = append(want, o)
	}
	var got []object
	for _, o := range objects {
		if o["kind"] != "CustomResourceDefinition" {
			got = append(got, o)
		}
	}
	compareObjects(t, got, want)
}

// shardManager is the manager Deployment of config/default as the manager
// of shard.
func shardManager(t *testing.T, manager object, shard string) object {
	t.Helper()
	data, err := yaml.Marshal(manager)
	if err != nil {
		t.Fatal(err)
	}
	var o object
	if err := yaml.Unmarshal(data, &o); err != nil {
		t.Fatal(err)
	}
	o["metadata"].(map[string]any)["name"] = "turnlog-manager-shard-" + shard
	for _, path := range [][]string{{"metadata", "labels"}, {"spec", "selector", "matchLabels"}, {"spec", "template", "metadata", "labels"}} {
		field(o, path...).(map[string]any)["turnlog.dev/shard"] = shard
	}
	c, err := managerContainer(o)
	if err != nil {
		t.Fatal(err)
	}
	c["args"] = append(c["args"].([]any), "--shard="+shard)
	return o
}
