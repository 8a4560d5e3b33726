package controllers

import (
	"bytes"
	"reflect"
	"regexp"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/worker"
)

// TestWorkerJob: a worker Job runs its run's own command line on the
// Session's location, with no Kubernetes credentials, under the restricted
// Pod Security Standard, owned by the Session, within the manager's
// settings. No API server: workerJob is a pure function.
func TestWorkerJob(t *testing.T) {
	session := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: "team-a", UID: types.UID("0d9e")}}
	loc := sessionlog.Location{Prefix: "p", Namespace: "team-a", Session: "chat", UID: "0d9e"}
	gpt5 := turnlog.Adapter{Kind: "pi-ai", API: "openai-responses", Provider: "openai", Model: "gpt-5"}
	line := func(a turnlog.Adapter, l string) turnlog.Adapter { a.ReleaseLine = l; return a }
	full := JobSettings{Image: "turnlog:test", ServiceAccount: "workers", CredentialsSecret: "creds",
		Resources:    corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
		BackoffLimit: 3, ActiveDeadlineSeconds: 900, TTLSecondsAfterFinished: 3600}
	bare := JobSettings{Image: "turnlog:test"}

	cases := []struct {
		name     string
		inv      worker.Invocation
		settings JobSettings
	}{
		{"assembly", worker.Invocation{Task: derived.TaskAssemble, StoreURL: "s3://logs", Location: loc}, full},
		{"replay under the 1.x line", worker.Invocation{Task: derived.TaskReplay, StoreURL: "s3://logs", Location: loc, Target: line(gpt5, "1")}, full},
		{"replay under the 0.73 line", worker.Invocation{Task: derived.TaskReplay, StoreURL: "s3://logs", Location: loc, Target: line(gpt5, "0.73")}, full},
		{"replay naming no line, default settings", worker.Invocation{Task: derived.TaskReplay, StoreURL: "file:///store", Location: loc, Target: gpt5}, bare},
	}
	for _, c := range cases {
		run := WorkerRun{Session: session, Name: "chat-" + string(c.inv.Task) + "-abc", Invocation: c.inv}
		job := workerJob(run, c.settings)
		pod := job.Spec.Template.Spec
		if len(pod.Containers) != 1 {
			t.Fatalf("%s: %d containers", c.name, len(pod.Containers))
		}
		ct := pod.Containers[0]

		// What the pod runs is the run, its termination message where the
		// kubelet reads it.
		if ct.Args[0] != "worker" {
			t.Errorf("%s: args %q do not run the worker", c.name, ct.Args)
		}
		var stderr bytes.Buffer
		got, err := worker.ParseArgs(ct.Args[1:], &stderr)
		want := c.inv
		want.TerminationMessagePath = corev1.TerminationMessagePathDefault
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the pod's command line %q runs %+v (%v %s), want %+v", c.name, ct.Args, got, err, stderr.String(), want)
		}
		if ct.TerminationMessagePath != corev1.TerminationMessagePathDefault || ct.Image != c.settings.Image {
			t.Errorf("%s: termination message at %q, image %q", c.name, ct.TerminationMessagePath, ct.Image)
		}

		switch {
		case job.Name != run.Name || job.Namespace != "team-a":
			t.Errorf("%s: Job %s/%s", c.name, job.Namespace, job.Name)
		case job.Labels[turnlogv1.LabelSession] != "0d9e" || job.Labels[turnlogv1.LabelTask] != string(c.inv.Task) || job.Labels["app.kubernetes.io/component"] != "worker":
			t.Errorf("%s: labels %v", c.name, job.Labels)
		case !reflect.DeepEqual(job.Spec.Template.Labels, job.Labels):
			t.Errorf("%s: pod labels %v, Job labels %v", c.name, job.Spec.Template.Labels, job.Labels)
		case len(job.OwnerReferences) != 1 || job.OwnerReferences[0].UID != "0d9e" || job.OwnerReferences[0].Kind != "Session" ||
			job.OwnerReferences[0].APIVersion != "turnlog.dev/v1alpha1" || !ptr.Deref(job.OwnerReferences[0].Controller, false):
			t.Errorf("%s: owner %+v", c.name, job.OwnerReferences)
		case ptr.Deref(pod.AutomountServiceAccountToken, true) || pod.ServiceAccountName != c.settings.ServiceAccount:
			t.Errorf("%s: the pod may mount a token (%v) or runs as %q", c.name, pod.AutomountServiceAccountToken, pod.ServiceAccountName)
		case pod.RestartPolicy != corev1.RestartPolicyNever || !*pod.SecurityContext.RunAsNonRoot ||
			pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || ptr.Deref(pod.EnableServiceLinks, true):
			t.Errorf("%s: pod restart %s, security %+v, service links %v", c.name, pod.RestartPolicy, pod.SecurityContext, pod.EnableServiceLinks)
		case *ct.SecurityContext.AllowPrivilegeEscalation || !*ct.SecurityContext.ReadOnlyRootFilesystem || !*ct.SecurityContext.RunAsNonRoot ||
			!reflect.DeepEqual(ct.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}):
			t.Errorf("%s: container security %+v", c.name, ct.SecurityContext)
		case *job.Spec.ActiveDeadlineSeconds != c.settings.ActiveDeadlineSeconds || *job.Spec.BackoffLimit != c.settings.BackoffLimit ||
			*job.Spec.TTLSecondsAfterFinished != c.settings.TTLSecondsAfterFinished:
			t.Errorf("%s: deadline %d, backoff %d, ttl %d", c.name, *job.Spec.ActiveDeadlineSeconds, *job.Spec.BackoffLimit, *job.Spec.TTLSecondsAfterFinished)
		case !reflect.DeepEqual(ct.Resources, c.settings.Resources):
			t.Errorf("%s: resources %+v", c.name, ct.Resources)
		}
		wantEnv := []corev1.EnvFromSource(nil)
		if c.settings.CredentialsSecret != "" {
			wantEnv = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: c.settings.CredentialsSecret}}}}
		}
		if !reflect.DeepEqual(ct.EnvFrom, wantEnv) {
			t.Errorf("%s: credentials %+v, want %+v", c.name, ct.EnvFrom, wantEnv)
		}
	}
}

// TestRunNameFollowsCommandLine: a run is named for what it runs, so that a
// run a manager gave up on under one command line (a release line it
// failed to pass, say) is not the run a manager that passes it starts.
func TestRunNameFollowsCommandLine(t *testing.T) {
	session := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: "team-a", UID: types.UID("0d9e")}}
	inv := worker.Invocation{Task: derived.TaskReplay, StoreURL: "s3://logs", Location: sessionlog.Location{Namespace: "team-a", Session: "chat", UID: "0d9e"},
		Target: turnlog.Adapter{Model: "gpt-5", ReleaseLine: "1"}}
	other := inv
	other.Target.ReleaseLine = "0.73"
	moved := inv
	moved.StoreURL = "s3://logs-2"
	names := map[string]string{}
	for what, n := range map[string]string{
		"the run":          runName(session, inv, "through=15"),
		"another line":     runName(session, other, "through=15"),
		"another store":    runName(session, moved, "through=15"),
		"a later turn/end": runName(session, inv, "through=21"),
	} {
		if prev, ok := names[n]; ok {
			t.Errorf("%s and %s are both named %s", prev, what, n)
		}
		names[n] = what
		if len(n) > 63 || !jobNamePattern.MatchString(n) {
			t.Errorf("%s: %q is no Job name", what, n)
		}
	}
	if a, b := runName(session, inv, "through=15"), runName(session, inv, "through=15"); a != b {
		t.Errorf("one run, two names: %s, %s", a, b)
	}
}

// jobNamePattern is a DNS label, what a Job's name must be.
var jobNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
