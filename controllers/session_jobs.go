package controllers

import (
	"context"
	"fmt"
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
)

// JobSettings are the manager's settings for the worker Jobs it creates.
type JobSettings struct {
	// Image holds the turnlog binary as its entrypoint.
	Image string
	// ServiceAccount the pods run as; its token is never mounted. Empty is
	// the namespace's default.
	ServiceAccount string
	// CredentialsSecret, if set, names a Secret in the Session's namespace
	// whose keys become the worker's environment (e.g. AWS_ACCESS_KEY_ID).
	CredentialsSecret string
	Resources         corev1.ResourceRequirements
	// BackoffLimit is how many times the Job controller retries a failed pod.
	BackoffLimit int32
	// ActiveDeadline bounds a run, retries included, so nothing stays
	// Running forever.
	ActiveDeadlineSeconds int64
	// TTLSecondsAfterFinished lets the Job controller remove finished Jobs.
	TTLSecondsAfterFinished int32
}

// JobWorkers runs each worker run as a batch/v1 Job (workerJob) whose pod
// has no Kubernetes credentials and runs under the restricted Pod Security
// Standard; results come back through object storage, and a one-line
// summary (or the failure) through the container's termination message.
type JobWorkers struct {
	Client client.Client
	// Reader reads straight from the API server: worker pods, which the
	// manager does not cache, and the Jobs that decide whether a Session
	// has a run going, which must not come from a cache a moment behind.
	Reader   client.Reader
	Settings JobSettings
	// NamespaceRuns is how many unfinished worker Jobs one namespace may
	// have; a run over it waits (WorkQueued), in line behind the
	// namespace's Sessions that waited before it. 0 is no limit.
	NamespaceRuns int
	line          jobLine
}

// The manager creates and removes worker Jobs and reads their pods'
// termination messages.
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list

// Run creates the run's Job if it does not exist and reports its outcome.
func (w *JobWorkers) Run(ctx context.Context, run WorkerRun) (WorkerOutcome, error) {
	job := &batchv1.Job{}
	err := w.Client.Get(ctx, client.ObjectKey{Namespace: run.Session.Namespace, Name: run.Name}, job)
	if apierrors.IsNotFound(err) {
		return w.start(ctx, run)
	}
	if err != nil {
		return WorkerOutcome{}, err
	}
	switch {
	case jobCondition(job, batchv1.JobComplete):
		return WorkerOutcome{Done: true, Attempt: string(job.UID)}, nil
	case jobCondition(job, batchv1.JobFailed):
		return WorkerOutcome{Failed: true, Attempt: string(job.UID), Message: w.failureMessage(ctx, job)}, nil
	}
	return WorkerOutcome{}, nil
}

// slotEvents wakes the Session at the front of a namespace's line
// (jobLine.freed) when one of the namespace's worker Jobs stops holding a
// slot: it finishes, or it is deleted unfinished. The Job's own Session
// hears of it through its owner reference, but that Session may have
// moved on to a run of another name, and a deleted Job's is gone.
func (w *JobWorkers) slotEvents() handler.EventHandler {
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			before, okBefore := e.ObjectOld.(*batchv1.Job)
			after, okAfter := e.ObjectNew.(*batchv1.Job)
			if okBefore && okAfter && holdsSlot(before) && !holdsSlot(after) {
				w.line.freed(after.Namespace)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if job, ok := e.Object.(*batchv1.Job); ok && holdsSlot(job) {
				w.line.freed(job.Namespace)
			}
		},
	}
}

// holdsSlot reports whether job counts against its namespace's
// --namespace-worker-runs.
func holdsSlot(job *batchv1.Job) bool {
	return job.DeletionTimestamp == nil && !jobCondition(job, batchv1.JobComplete) && !jobCondition(job, batchv1.JobFailed)
}

// start creates run's Job, if its namespace has a slot for it.
func (w *JobWorkers) start(ctx context.Context, run WorkerRun) (WorkerOutcome, error) {
	if w.NamespaceRuns > 0 {
		// Counting and creating are one step for the namespace, or two
		// reconciles could both find the last slot free.
		defer w.line.lock(run.Session.Namespace)()
		if full, err := w.namespaceFull(ctx, run.Session); err != nil || full.Queued {
			return full, err
		}
	}
	job := workerJob(run, w.Settings)
	if err := w.Client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return WorkerOutcome{}, fmt.Errorf("create worker Job %s: %w", run.Name, err)
	}
	return WorkerOutcome{}, nil
}

// namespaceFull says why session may not start a Job now, if it may not
// (a Queued outcome): its namespace has no slot free, or not one for each
// Session waiting ahead of it (jobLine). It lists from the API server, not
// the cache, like Busy: a Job just created by the previous reconcile must
// count.
func (w *JobWorkers) namespaceFull(ctx context.Context, session *turnlogv1.Session) (WorkerOutcome, error) {
	namespace := session.Namespace
	jobs := &batchv1.JobList{}
	if err := w.Reader.List(ctx, jobs, client.InNamespace(namespace), client.MatchingLabels(workerLabels)); err != nil {
		return WorkerOutcome{}, err
	}
	running := 0
	for i := range jobs.Items {
		if holdsSlot(&jobs.Items[i]) {
			running++
		}
	}
	ok, ahead, retry := w.line.admit(client.ObjectKeyFromObject(session), w.NamespaceRuns-running, w.NamespaceRuns)
	if ok {
		return WorkerOutcome{}, nil
	}
	slotsQueued.WithLabelValues("namespace-worker-runs").Inc()
	msg := fmt.Sprintf("namespace %s has %d worker Jobs going", namespace, running)
	switch {
	case ahead == 1:
		msg += " and 1 Session waiting ahead of this one"
	case ahead > 1:
		msg += fmt.Sprintf(" and %d Sessions waiting ahead of this one", ahead)
	}
	return WorkerOutcome{Queued: true, RetryAfter: retry, Message: fmt.Sprintf("%s (--namespace-worker-runs=%d)", msg, w.NamespaceRuns)}, nil
}

// Retry deletes the run's finished Job, so that the next Run creates it
// afresh under the same name.
func (w *JobWorkers) Retry(ctx context.Context, run WorkerRun) error {
	job := &batchv1.Job{}
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: run.Session.Namespace, Name: run.Name}, job); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !jobCondition(job, batchv1.JobFailed) && !jobCondition(job, batchv1.JobComplete) {
		return nil
	}
	if err := w.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &job.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete finished worker Job %s: %w", job.Name, err)
	}
	return nil
}

// Busy returns the name of an unfinished worker Job of session other than
// name.
func (w *JobWorkers) Busy(ctx context.Context, session *turnlogv1.Session, name string) (string, error) {
	jobs := &batchv1.JobList{}
	if err := w.Reader.List(ctx, jobs, client.InNamespace(session.Namespace), client.MatchingLabels{turnlogv1.LabelSession: string(session.UID)}); err != nil {
		return "", err
	}
	for i := range jobs.Items {
		if j := &jobs.Items[i]; j.Name != name && holdsSlot(j) {
			return j.Name, nil
		}
	}
	return "", nil
}

// Forget deletes session's worker Jobs; their pods follow.
func (w *JobWorkers) Forget(ctx context.Context, session *turnlogv1.Session) error {
	w.line.leave(client.ObjectKeyFromObject(session))
	jobs := &batchv1.JobList{}
	if err := w.Client.List(ctx, jobs, client.InNamespace(session.Namespace), client.MatchingLabels{turnlogv1.LabelSession: string(session.UID)}); err != nil {
		return err
	}
	for i := range jobs.Items {
		if err := w.Client.Delete(ctx, &jobs.Items[i], client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// reasonOOMKilled is the reason a container runtime gives a container the
// kernel killed for exceeding its memory limit.
const reasonOOMKilled = "OOMKilled"

// failureMessage is the last failed pod's termination message (saying
// OOMKilled when it was), else the Job's own reason (deadline exceeded,
// backoff limit reached).
func (w *JobWorkers) failureMessage(ctx context.Context, job *batchv1.Job) string {
	pods := &corev1.PodList{}
	if err := w.Reader.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}); err == nil {
		for _, pod := range pods.Items {
			for _, cs := range pod.Status.ContainerStatuses {
				t := cs.State.Terminated
				if t == nil || t.ExitCode == 0 {
					continue
				}
				// The kernel's OOM kill leaves the worker no chance to say
				// so; the runtime's reason does.
				if t.Reason == reasonOOMKilled {
					msg := fmt.Sprintf("pod %s: OOMKilled: over its memory limit", pod.Name)
					if t.Message != "" {
						msg += ": " + t.Message
					}
					return derived.Truncate(msg, 1024)
				}
				if t.Message != "" {
					return derived.Truncate(t.Message, 1024)
				}
			}
		}
	}
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed {
			return derived.Truncate(fmt.Sprintf("worker Job %s failed: %s: %s", job.Name, c.Reason, c.Message), 1024)
		}
	}
	return fmt.Sprintf("worker Job %s failed", job.Name)
}

// workerLabels are on every worker Job; the manager caches only Jobs with
// them.
var workerLabels = map[string]string{"app.kubernetes.io/name": "turnlog", "app.kubernetes.io/component": "worker"}

// sessionKind is the kind worker Jobs' owner references name.
var sessionKind = turnlogv1.GroupVersion.WithKind("Session")

// workerJob builds the Job of a run: a pure function of the run and the
// manager's settings. The container's arguments are the run's own command
// line (worker.Invocation.Args), the one local runs parse too.
func workerJob(run WorkerRun, s JobSettings) *batchv1.Job {
	labels := map[string]string{
		turnlogv1.LabelSession: string(run.Session.UID),
		turnlogv1.LabelTask:    string(run.Task),
	}
	maps.Copy(labels, workerLabels)
	inv := run.Invocation
	inv.TerminationMessagePath = corev1.TerminationMessagePathDefault
	container := corev1.Container{
		Name:  "worker",
		Image: s.Image,
		// The image's entrypoint is the turnlog binary.
		Args:                     inv.Args(),
		Resources:                s.Resources,
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			RunAsNonRoot:             ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	if s.CredentialsSecret != "" {
		container.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: s.CredentialsSecret},
		}}}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: run.Name, Namespace: run.Session.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run.Session, sessionKind)},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To(s.BackoffLimit),
			ActiveDeadlineSeconds:   ptr.To(s.ActiveDeadlineSeconds),
			TTLSecondsAfterFinished: ptr.To(s.TTLSecondsAfterFinished),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					ServiceAccountName:           s.ServiceAccount,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{container},
				},
			},
		},
	}
}
