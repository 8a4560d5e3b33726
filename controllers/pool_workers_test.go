package controllers

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/turnlog/turnlog/internal/worker"
)

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
		RunsPerPod: 2,
	}
	secret := poolSecret("team-a", "token-a", []byte("CERT"))
	d := poolDeployment("team-a", 3, s, configDigest(secret, s.Endpoint))

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
		"token":    configDigest(poolSecret("team-a", "token-b", []byte("CERT")), s.Endpoint),
		"cert":     configDigest(poolSecret("team-a", "token-a", []byte("CERT2")), s.Endpoint),
		"endpoint": configDigest(secret, "https://10.0.0.8:9444"),
	} {
		if digest == d.Spec.Template.Annotations[annotationPoolConfig] {
			t.Errorf("a new %s leaves the pod template as it was", what)
		}
	}
}

// What a Session waiting for a worker pod says when the namespace's pods
// cannot take runs.
func TestPodTrouble(t *testing.T) {
	labels := poolLabels
	pod := func(name string, status corev1.PodStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: labels}, Status: status}
	}
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want string
	}{
		{"no pod", nil, "no worker pod exists yet"},
		{"starting", []*corev1.Pod{pod("w-1", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}})}, ""},
		{"image", []*corev1.Pod{pod("w-1", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "turnlog:nope"`}}}}})},
			`pod w-1: ImagePullBackOff: Back-off pulling image "turnlog:nope"`},
		{"crash loop", []*corev1.Pod{pod("w-1", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}})},
			"pod w-1: CrashLoopBackOff (last exit 137, OOMKilled)"},
		{"unschedulable", []*corev1.Pod{pod("w-1", corev1.PodStatus{Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/3 nodes are available: 3 Insufficient memory."}}})},
			"pod w-1 is not scheduled: 0/3 nodes are available: 3 Insufficient memory."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(scheme.Scheme)
			for _, p := range tc.pods {
				b = b.WithObjects(p)
			}
			w := &PoolWorkers{Reader: b.Build()}
			got := w.podTrouble(context.Background(), "team-a")
			if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
				t.Errorf("podTrouble = %q, want %q", got, tc.want)
			}
		})
	}
}
