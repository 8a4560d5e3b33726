package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/worker"
)

// The objects pod worker mode keeps in a busy namespace.
const (
	// poolName names the Deployment of a namespace's worker pods, and the
	// Secret that holds their token and the manager's certificate.
	poolName = "turnlog-worker"
	// labelPool marks them, and the pods.
	labelPool = "turnlog.dev/worker-pool"
	// annotationPoolConfig is a digest of what the pods are told (the
	// endpoint, its certificate, the token): when it changes (a manager
	// restarted with a new key), the pods are replaced.
	annotationPoolConfig = "turnlog.dev/worker-config"
)

// poolLabels are on the worker Deployments, their Secrets and pods.
var poolLabels = map[string]string{"app.kubernetes.io/name": "turnlog", "app.kubernetes.io/component": "worker", labelPool: "true"}

// name is the name of the worker Deployment and Secret of the manager's
// shard: each shard's manager keeps its own in a namespace that has
// Sessions of several shards, as its pods lease runs from it alone.
func (s PoolSettings) name() string {
	if s.shard == "" {
		return poolName
	}
	return poolName + "-" + s.shard
}

// labels are poolLabels, with the shard's label for a manager of one
// shard: its Deployments select only their own pods, and it adopts, reads
// and deletes only its own.
func (s PoolSettings) labels() map[string]string {
	l := maps.Clone(poolLabels)
	if s.shard != "" {
		l[turnlogv1.LabelShard] = s.shard
	}
	return l
}

// poolObjects are what pod worker mode keeps in a namespace with work.
type poolObjects struct {
	// secret holds the pods' token and the manager's certificate.
	secret *corev1.Secret
	// deployment runs the pods.
	deployment *appsv1.Deployment
}

// poolSpecs builds namespace's worker pool objects from the settings and
// the namespace's token, and from nothing else: the pods it asks for are
// fixed by the golden files in testdata/ (pool_specs_test.go).
func poolSpecs(namespace string, replicas int32, s PoolSettings, token string) poolObjects {
	secret := poolSecret(namespace, token, s)
	return poolObjects{secret: secret, deployment: poolDeployment(namespace, replicas, s, configDigest(secret, s.Endpoint))}
}

// poolSecret holds what a namespace's worker pods authenticate with: the
// namespace's token, and the certificate the manager's endpoint presents.
func poolSecret(namespace, token string, s PoolSettings) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.name(), Namespace: namespace, Labels: s.labels()},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"token": []byte(token), "ca.crt": s.CertPEM},
	}
}

// configDigest identifies what the pods are told, so that pods told
// something else are replaced.
func configDigest(secret *corev1.Secret, endpoint string) string {
	h := sha256.New()
	for _, k := range []string{"token", "ca.crt"} {
		h.Write(secret.Data[k])
		h.Write([]byte{0})
	}
	h.Write([]byte(endpoint))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// poolDeployment is namespace's worker pods: a pure function of the
// settings. Each pod runs `turnlog worker serve` with no Kubernetes
// credentials, under the restricted Pod Security Standard, as a Job's
// does.
func poolDeployment(namespace string, replicas int32, s PoolSettings, digest string) *appsv1.Deployment {
	labels := s.labels()
	secretKey := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: s.name()}, Key: key}}
	}
	container := corev1.Container{
		Name:  "worker",
		Image: s.Image,
		Args: append([]string{"worker", "serve", "--endpoint=" + s.Endpoint, "--namespace=" + namespace,
			fmt.Sprintf("--runs=%d", s.RunsPerPod)}, s.OTLP.Args()...),
		Env: []corev1.EnvVar{
			{Name: worker.EnvPod, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: worker.EnvToken, ValueFrom: secretKey("token")},
			{Name: worker.EnvCA, ValueFrom: secretKey("ca.crt")},
		},
		Resources:                s.Resources,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          restrictedContainer(),
	}
	if s.CredentialsSecret != "" {
		container.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: s.CredentialsSecret},
		}}}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: s.name(), Namespace: namespace, Labels: maps.Clone(labels)},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: maps.Clone(labels)},
			// Pods told an old token are of no use: replace them all at
			// once.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{annotationPoolConfig: digest}},
				Spec: corev1.PodSpec{
					ServiceAccountName:           s.ServiceAccount,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext:              restrictedPod(),
					Containers:                   []corev1.Container{container},
				},
			},
		},
	}
}

// restrictedContainer and restrictedPod are what the restricted Pod
// Security Standard asks of a worker's container and pod.
func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

func restrictedPod() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
