package controllers

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/turnlog/turnlog/internal/telemetry"

	"github.com/turnlog/turnlog/internal/worker"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata/ with what the code builds now")

// TestPoolSpecsGolden: the worker pool's Secret and Deployment, to the
// byte, for settings with every option and for the defaults. A change to
// what the pods run as (the restricted security context), get (resources,
// env, the credentials Secret) or are labelled with fails here until the
// golden files are rewritten with -update and the diff reviewed:
//
//	go test ./controllers/ -run TestPoolSpecsGolden -update
func TestPoolSpecsGolden(t *testing.T) {
	for _, c := range []struct {
		name     string
		replicas int32
		settings PoolSettings
	}{
		{"full", 3, PoolSettings{
			Image: "ghcr.io/turnlog/turnlog:v1", ServiceAccount: "turnlog-worker", CredentialsSecret: "store-credentials",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
			},
			Endpoint: "https://10.0.0.7:9444", CertPEM: []byte("CERT"), RunsPerPod: 2,
			OTLP: telemetry.Flags{Endpoint: "http://otel-collector.observability:4318", CaptureContent: true},
		}},
		{"defaults", 1, PoolSettings{
			Image: "ghcr.io/turnlog/turnlog:v1", Endpoint: "https://turnlog-worker-endpoint.turnlog-system.svc:9444",
			CertPEM: []byte("CERT"), RunsPerPod: DefaultWorkerPodRuns,
		}},
		// A manager of shard b: its own Deployment and Secret beside other
		// shards', selecting only its own pods.
		{"shard", 1, PoolSettings{
			Image: "ghcr.io/turnlog/turnlog:v1", Endpoint: "https://10.0.0.9:9444",
			CertPEM: []byte("CERT"), RunsPerPod: DefaultWorkerPodRuns, shard: "b",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			specs := poolSpecs("team-a", c.replicas, c.settings, "token-a")
			for kind, obj := range map[string]any{"secret": specs.secret, "deployment": specs.deployment} {
				got, err := yaml.Marshal(obj)
				if err != nil {
					t.Fatal(err)
				}
				golden(t, filepath.Join("testdata", fmt.Sprintf("pool-%s-%s.yaml", c.name, kind)), got)
			}
		})
	}
}

// golden compares got with the file at path, or with -update writes it
// there.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: -update writes it", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	line := 0
	for line < min(len(gotLines), len(wantLines)) && gotLines[line] == wantLines[line] {
		line++
	}
	at := func(lines []string) string {
		if line < len(lines) {
			return lines[line]
		}
		return "(end of file)"
	}
	t.Errorf("%s: what the code builds differs from line %d on:\n got: %s\nwant: %s\nif the change is meant, rewrite the file with -update and review its diff",
		path, line+1, at(gotLines), at(wantLines))
}

// The worker pods as the namespace's Deployment asks for them: what the
// restricted Pod Security Standard requires, no Kubernetes credentials,
// the namespace's token and the manager's certificate from the Secret, the
// store credentials from the operator's Secret, and a pod template that
// changes (so the pods are replaced) when what they are told changes.
func TestPoolDeployment(t *testing.T) {
	s := PoolSettings{
		Image: "ghcr.io/turnlog/turnlog:v1", ServiceAccount: "turnlog-worker", CredentialsSecret: "store-credentials",
		Resources:  corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
		Endpoint:   "https://10.0.0.7:9444",
		CertPEM:    []byte("CERT"),
		RunsPerPod: 2,
	}
	specs := poolSpecs("team-a", 3, s, "token-a")
	secret, d := specs.secret, specs.deployment

	if d.Namespace != "team-a" || d.Name != poolName || *d.Spec.Replicas != 3 {
		t.Errorf("Deployment %s/%s with %d replicas, want team-a/%s with 3", d.Namespace, d.Name, *d.Spec.Replicas, poolName)
	}
	if d.Spec.Strategy.Type != "Recreate" {
		t.Errorf("strategy %s: pods told an old token must all go at once", d.Spec.Strategy.Type)
	}
	pod := d.Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pods mount a service-account token")
	}
	if pod.ServiceAccountName != "turnlog-worker" {
		t.Errorf("service account %q", pod.ServiceAccountName)
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v is not restricted", sc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	csc := c.SecurityContext
	if csc == nil || *csc.AllowPrivilegeEscalation || !*csc.ReadOnlyRootFilesystem || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v is not restricted", csc)
	}
	wantArgs := []string{"worker", "serve", "--endpoint=https://10.0.0.7:9444", "--namespace=team-a", "--runs=2"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args %q, want %q", c.Args, wantArgs)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for name, key := range map[string]string{worker.EnvToken: "token", worker.EnvCA: "ca.crt"} {
		ref := env[name].ValueFrom
		if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != poolName || ref.SecretKeyRef.Key != key {
			t.Errorf("%s is not Secret %s's key %s: %+v", name, poolName, key, env[name])
		}
	}
	if ref := env[worker.EnvPod].ValueFrom; ref == nil || ref.FieldRef == nil || ref.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("%s is not the pod's name: %+v", worker.EnvPod, env[worker.EnvPod])
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef.Name != "store-credentials" {
		t.Errorf("envFrom %+v, want the store credentials Secret", c.EnvFrom)
	}
	if !c.Resources.Limits.Memory().Equal(resource.MustParse("256Mi")) {
		t.Errorf("memory limit %s", c.Resources.Limits.Memory())
	}
	if string(secret.Data["token"]) != "token-a" || string(secret.Data["ca.crt"]) != "CERT" {
		t.Errorf("Secret data %q", secret.Data)
	}

	// Another token (a restarted manager) or another endpoint: another
	// pod template, so the pods are replaced.
	for what, digest := range map[string]string{
		"token":    configDigest(poolSecret("team-a", "token-b", s), s.Endpoint),
		"cert":     configDigest(poolSecret("team-a", "token-a", PoolSettings{CertPEM: []byte("CERT2")}), s.Endpoint),
		"endpoint": configDigest(secret, "https://10.0.0.8:9444"),
	} {
		if digest == d.Spec.Template.Annotations[annotationPoolConfig] {
			t.Errorf("a new %s leaves the pod template as it was", what)
		}
	}
}
