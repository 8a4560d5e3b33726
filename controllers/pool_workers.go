package controllers

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/telemetry"
	"github.com/turnlog/turnlog/internal/workerpool"
)

// PoolSettings configure the worker pods of pod worker mode.
type PoolSettings struct {
	// Image holds the turnlog binary as its entrypoint.
	Image string
	// ServiceAccount the pods run as; its token is never mounted. Empty is
	// the namespace's default.
	ServiceAccount string
	// CredentialsSecret, if set, names a Secret in the Session's namespace
	// whose keys become the worker's environment (e.g. AWS_ACCESS_KEY_ID).
	CredentialsSecret string
	Resources         corev1.ResourceRequirements
	// Endpoint is the URL worker pods dial (https://HOST:PORT); Listen is
	// the address the manager serves it on.
	Endpoint, Listen string
	// CertPEM and KeyPEM are what the endpoint presents; pods trust
	// CertPEM and nothing else. Key derives each namespace's token
	// (workerpool.Tokens). Those not set are made at start.
	CertPEM, KeyPEM []byte
	Key             []byte
	// RunsPerPod is how many runs one pod works on at once.
	RunsPerPod int
	// IdleTimeout is how long a namespace keeps its pods with nothing to
	// do.
	IdleTimeout time.Duration
	// MaxRunTime bounds one run; a run past it is given up as lost.
	MaxRunTime time.Duration
	// Namespaces are the namespaces the manager watches (--watch-namespace);
	// empty: every namespace.
	Namespaces []string
	// OTLP is the manager's trace export, which its worker pods share.
	OTLP telemetry.Flags

	// shard is Config.Shard, which Setup copies here: it names and labels
	// the shard's own worker Deployments.
	shard string
}

// Defaults of PoolSettings.
const (
	DefaultWorkerIdleTimeout = 2 * time.Minute
	DefaultWorkerPodRuns     = 1
)

// PoolWorkers hands each worker run to worker pods that stay while their
// namespace is busy: a Deployment per namespace with work, scaled with its
// backlog up to --namespace-worker-runs runs at once and removed once the
// namespace has been idle for IdleTimeout. Runs reach the pods from the
// manager's Board over HTTPS (workerpool): a turn costs no Kubernetes
// object. A pod holds its namespace's token and store credentials and no
// Kubernetes credentials at all.
type PoolWorkers struct {
	Client client.Client
	// Reader reads straight from the API server: the manager does not
	// cache Deployments, Secrets or pods.
	Reader        client.Reader
	Settings      PoolSettings
	NamespaceRuns int

	board  *workerpool.Board
	tokens workerpool.Tokens
	// wake reconciles a Session at once, without dropping it.
	wake func(types.NamespacedName)
	kick chan struct{}

	mu sync.Mutex
	// applied is the number of pods last set per namespace; lastBusy when
	// each last had a run on the board.
	applied  map[string]int32
	lastBusy map[string]time.Time
	// lostWhy says why each run's last lost lease was lost (the pod's
	// state when it was), for the failure a run that lost them all reports.
	lostWhy map[types.NamespacedName]string
	// lostFrom is the pod each run last lost, and why.
	lostFrom map[types.NamespacedName]lostCause
	// trouble says, per namespace whose runs wait with none in flight,
	// why its pods take none (a pull error, a crash loop); troubleAt when
	// it was last looked for.
	trouble   map[string]string
	troubleAt map[string]time.Time
}

// newPoolWorkers returns worker pods that wake Sessions through wake.
func newPoolWorkers(c client.Client, reader client.Reader, s PoolSettings, namespaceRuns int, wake func(types.NamespacedName)) (*PoolWorkers, error) {
	switch {
	case s.Image == "":
		return nil, errors.New("pod worker mode needs a worker image")
	case s.Endpoint == "" || s.Listen == "":
		return nil, errors.New("pod worker mode needs the endpoint worker pods dial and an address to listen on")
	}
	if err := s.makeCredentials(); err != nil {
		return nil, err
	}
	if s.RunsPerPod <= 0 {
		s.RunsPerPod = DefaultWorkerPodRuns
	}
	if s.IdleTimeout <= 0 {
		s.IdleTimeout = DefaultWorkerIdleTimeout
	}
	w := &PoolWorkers{Client: c, Reader: reader, Settings: s, NamespaceRuns: namespaceRuns,
		tokens: workerpool.Tokens{Key: s.Key}, wake: wake, kick: make(chan struct{}, 1),
		applied: map[string]int32{}, lastBusy: map[string]time.Time{}, lostWhy: map[types.NamespacedName]string{},
		lostFrom: map[types.NamespacedName]lostCause{},
		trouble:  map[string]string{}, troubleAt: map[string]time.Time{}}
	w.board = workerpool.NewBoard(workerpool.Options{
		NamespaceRuns: namespaceRuns, MaxRunTime: s.MaxRunTime,
		Leased: w.leased, Finished: w.finished, Lost: w.lost,
	})
	return w, nil
}

// makeCredentials makes what the settings lack: the endpoint's certificate,
// for the host of Endpoint, and the tokens' key. Made for each run of the
// manager, they need no storing or rotating; a restarted manager replaces
// the pods told the old ones.
func (s *PoolSettings) makeCredentials() error {
	if len(s.CertPEM) == 0 || len(s.KeyPEM) == 0 {
		u, err := url.Parse(s.Endpoint)
		if err != nil || u.Scheme != "https" || u.Hostname() == "" {
			return fmt.Errorf("worker endpoint %q: want https://HOST:PORT", s.Endpoint)
		}
		host := u.Hostname()
		var ips []net.IP
		var names []string
		if ip := net.ParseIP(host); ip != nil {
			ips = append(ips, ip)
		} else {
			names = append(names, host)
		}
		if s.CertPEM, s.KeyPEM, err = cert.GenerateSelfSignedCertKey(host, ips, names); err != nil {
			return fmt.Errorf("making the worker endpoint's certificate: %w", err)
		}
	}
	if len(s.Key) == 0 {
		s.Key = make([]byte, 32)
		if _, err := rand.Read(s.Key); err != nil {
			return err
		}
	}
	return nil
}

// The manager runs worker pods in the namespaces it has work in, and
// gives them their token; it deletes a pod that stopped answering, and
// reads why (OOMKilled).
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;create;update;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;delete

// Run puts the run on its namespace's board, if it is not there, and
// reports where it stands.
func (w *PoolWorkers) Run(_ context.Context, run WorkerRun) (WorkerOutcome, error) {
	ns := run.Session.Namespace
	st, ok := w.board.Get(ns, run.Name)
	if !ok {
		st = w.board.Submit(workerpool.Run{Namespace: ns, Name: run.Name, Session: run.Session.Name,
			SessionUID: string(run.Session.UID), Args: run.Args()})
		w.nudge()
	}
	switch st.State {
	case workerpool.Done:
		return WorkerOutcome{Done: true, Attempt: st.Attempt, Pod: st.Pod}, nil
	case workerpool.Failed:
		msg := st.Message
		if st.Abandoned {
			w.mu.Lock()
			if why := w.lostWhy[types.NamespacedName{Namespace: ns, Name: run.Name}]; why != "" {
				msg = why + " (" + msg + ")"
			}
			w.mu.Unlock()
		}
		return WorkerOutcome{Failed: true, Attempt: st.Attempt, Pod: st.Pod, Message: derived.Truncate(msg, 1024)}, nil
	case workerpool.Leased:
		return WorkerOutcome{Pod: st.Pod}, nil
	}
	w.mu.Lock()
	trouble := w.trouble[ns]
	w.mu.Unlock()
	return WorkerOutcome{Waiting: true, Message: trouble}, nil
}

// Retry takes the finished run off the board, so the next Run submits it
// afresh.
func (w *PoolWorkers) Retry(_ context.Context, run WorkerRun) error {
	w.board.Remove(run.Session.Namespace, run.Name)
	return nil
}

// Busy returns the name of another unfinished run of session.
func (w *PoolWorkers) Busy(_ context.Context, session *turnlogv1.Session, name string) (string, error) {
	return w.board.Busy(session.Namespace, string(session.UID), name), nil
}

// Forget takes session's runs off the board; a pod working on one stops.
func (w *PoolWorkers) Forget(_ context.Context, session *turnlogv1.Session) error {
	w.board.RemoveSession(session.Namespace, string(session.UID))
	return nil
}

// nudge makes the pool look at its namespaces now: a namespace's first run
// should not wait a tick for its pod.
func (w *PoolWorkers) nudge() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// leased: a run that is still going a moment after its pod took it shows
// the pod in status.worker; a short one finishes before anyone could look.
func (w *PoolWorkers) leased(run workerpool.Run, st workerpool.Status) {
	poolRunsLeased.Inc()
	time.AfterFunc(time.Second, func() {
		if now, ok := w.board.Get(run.Namespace, run.Name); ok && now.State == workerpool.Leased && now.Began.Equal(st.Began) {
			w.wake(types.NamespacedName{Namespace: run.Namespace, Name: run.Session})
		}
	})
}

// finished wakes the run's Session, which reads the results.
func (w *PoolWorkers) finished(run workerpool.Run, st workerpool.Status) {
	if !st.Began.IsZero() {
		poolRunSeconds.WithLabelValues(runTask(run.Args), string(st.State)).Observe(time.Since(st.Began).Seconds())
	}
	w.wake(types.NamespacedName{Namespace: run.Namespace, Name: run.Session})
}

// lost notes why a lease was lost, from its pod, and deletes the pod if it
// is still there: it is hung, or cut off, and its Deployment replaces it.
// It runs in the pool's loop (Expire), never in a reconcile.
func (w *PoolWorkers) lost(run workerpool.Run, st workerpool.Status) {
	poolRunsLost.Inc()
	why := st.Message
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pod := &corev1.Pod{}
	err := w.Reader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: st.LostPod}, pod)
	if err == nil {
		if oom := oomKilled(pod); oom != "" {
			why = oom
		}
		if pod.DeletionTimestamp == nil {
			_ = w.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
		}
	} else if apierrors.IsNotFound(err) {
		why = fmt.Sprintf("worker pod %s was deleted during the run", st.LostPod)
	}
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	w.mu.Lock()
	// A pod's restarted container may lease the run again before the pod
	// is deleted here; its next loss then finds the pod gone. The first
	// cause of the pod's losses (OOMKilled) is the one worth reporting.
	if prev, ok := w.lostFrom[key]; ok && prev.pod == st.LostPod && apierrors.IsNotFound(err) {
		why = prev.why
	}
	w.lostFrom[key] = lostCause{pod: st.LostPod, why: why}
	w.lostWhy[key] = why
	w.mu.Unlock()
	logf.Log.WithName("worker-pool").Info("a worker pod stopped answering during a run; the run is done again", "namespace", run.Namespace, "run", run.Name, "pod", st.LostPod, "why", why)
}

// lostCause is a pod that lost a run's lease, and why.
type lostCause struct{ pod, why string }

// reasonOOMKilled is the reason a container runtime gives a container the
// kernel killed for exceeding its memory limit.
const reasonOOMKilled = "OOMKilled"

// oomKilled says so if the kernel killed pod's worker for its memory
// limit, now or the last time it ran; "" otherwise.
func oomKilled(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil && t.Reason == reasonOOMKilled {
				return fmt.Sprintf("pod %s: OOMKilled: over its memory limit", pod.Name)
			}
		}
	}
	return ""
}

// runTask is the task of a worker command line (worker TASK ...).
func runTask(args []string) string {
	if len(args) > 1 {
		return args[1]
	}
	return ""
}

// Start serves the pool's API and keeps each namespace's pods in line with
// its runs until ctx ends. Only the leader does: its board is the one the
// reconciles fill.
func (w *PoolWorkers) Start(ctx context.Context) error {
	pair, err := tls.X509KeyPair(w.Settings.CertPEM, w.Settings.KeyPEM)
	if err != nil {
		return fmt.Errorf("the worker endpoint's certificate: %w", err)
	}
	listener, err := net.Listen("tcp", w.Settings.Listen)
	if err != nil {
		return fmt.Errorf("listen for worker pods on %s: %w", w.Settings.Listen, err)
	}
	srv := &http.Server{
		Handler:           workerpool.Handler(w.board, w.tokens),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(listener, "", "") }()
	log := logf.FromContext(ctx).WithName("worker-pool")
	log.Info("serving worker pods", "listen", w.Settings.Listen, "endpoint", w.Settings.Endpoint)
	w.adopt(ctx)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = srv.Shutdown(shutdown)
			cancel()
			return nil
		case err := <-served:
			return fmt.Errorf("serving worker pods: %w", err)
		case <-tick.C:
			w.board.Expire()
		case <-w.kick:
		}
		if err := w.scale(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "scaling worker pods")
		}
	}
}

// NeedLeaderElection: only the leader hands out runs.
func (*PoolWorkers) NeedLeaderElection() bool { return true }

// adopt takes over the worker Deployments a previous manager left: they
// are scaled as this manager's runs need, and removed once idle.
func (w *PoolWorkers) adopt(ctx context.Context) {
	// A manager watching some namespaces may list only in those.
	scopes := []client.ListOption{}
	for _, ns := range w.Settings.Namespaces {
		scopes = append(scopes, client.InNamespace(ns))
	}
	if len(scopes) == 0 {
		scopes = append(scopes, client.InNamespace(""))
	}
	for _, scope := range scopes {
		list := &appsv1.DeploymentList{}
		if err := w.Reader.List(ctx, list, scope, client.MatchingLabels(w.Settings.labels())); err != nil {
			logf.FromContext(ctx).Error(err, "listing worker Deployments a previous manager left")
			continue
		}
		w.mu.Lock()
		for _, d := range list.Items {
			w.applied[d.Namespace] = -1 // unknown: set at the next look
			w.lastBusy[d.Namespace] = time.Now()
		}
		w.mu.Unlock()
	}
}

// scale sets each namespace's pods from its runs: as many as its runs
// waiting and in flight need, up to NamespaceRuns runs at once, never
// fewer while it is busy (a Deployment scaled down may stop a pod in the
// middle of a run), and none once it has been idle for IdleTimeout.
func (w *PoolWorkers) scale(ctx context.Context) error {
	now := time.Now()
	want := map[string]int32{}
	w.mu.Lock()
	onBoard := map[string]bool{}
	for _, s := range w.board.Namespaces(w.Settings.IdleTimeout + time.Minute) {
		onBoard[s.Namespace] = true
		busy := s.Waiting + s.Leased
		if cur, known := w.applied[s.Namespace]; known && cur == 0 && busy == 0 {
			continue // its pods are removed: left alone until it has work again
		}
		poolRunsWaiting.WithLabelValues(s.Namespace).Set(float64(s.Waiting))
		poolRunsInFlight.WithLabelValues(s.Namespace).Set(float64(s.Leased))
		if busy > 0 {
			w.lastBusy[s.Namespace] = now
		} else if !s.IdleSince.IsZero() && s.IdleSince.After(w.lastBusy[s.Namespace]) {
			w.lastBusy[s.Namespace] = s.IdleSince
		}
		cur, known := w.applied[s.Namespace]
		if known && cur < 0 && busy == 0 {
			continue // adopted, and not needed yet: kept until idle
		}
		want[s.Namespace] = max(cur, w.podsFor(busy))
	}
	for ns, at := range w.lastBusy {
		if now.Sub(at) > w.Settings.IdleTimeout {
			want[ns] = 0
		}
	}
	for ns, n := range w.applied {
		if n == 0 && !onBoard[ns] {
			delete(w.applied, ns) // forgotten with the board's line
		}
	}
	w.mu.Unlock()

	w.diagnose(ctx, now)

	var errs []error
	for ns, n := range want {
		w.mu.Lock()
		applied, known := w.applied[ns]
		w.mu.Unlock()
		if known && applied == n {
			continue
		}
		if err := w.apply(ctx, ns, n); err != nil {
			errs = append(errs, fmt.Errorf("namespace %s: %w", ns, err))
			continue
		}
		w.mu.Lock()
		if n == 0 {
			w.applied[ns] = 0
			delete(w.lastBusy, ns)
			for k := range w.lostWhy {
				if k.Namespace == ns {
					delete(w.lostWhy, k)
					delete(w.lostFrom, k)
				}
			}
			poolRunsWaiting.DeleteLabelValues(ns)
			poolRunsInFlight.DeleteLabelValues(ns)
			poolPods.DeleteLabelValues(ns)
		} else {
			w.applied[ns] = n
			poolPods.WithLabelValues(ns).Set(float64(n))
		}
		w.mu.Unlock()
	}
	return errors.Join(errs...)
}

// troubleAfter is how long a namespace's runs wait with none in flight
// before its pods are looked at; troubleEvery how often they are then.
const (
	troubleAfter = 15 * time.Second
	troubleEvery = 10 * time.Second
)

// diagnose looks at the pods of each namespace whose runs have waited
// troubleAfter with none in flight, and tells the waiting Sessions what
// keeps the pods from taking them (Run's Waiting message) when that
// changes: an operator reading `kubectl get session` learns of an image
// that cannot be pulled or a worker that crashes without reading pods.
func (w *PoolWorkers) diagnose(ctx context.Context, now time.Time) {
	for _, s := range w.board.Namespaces(w.Settings.IdleTimeout + time.Minute) {
		ns := s.Namespace
		w.mu.Lock()
		stuck := s.Waiting > 0 && s.Leased == 0 && now.Sub(w.board.OldestWaiting(ns)) > troubleAfter
		due := now.Sub(w.troubleAt[ns]) > troubleEvery
		if !stuck {
			delete(w.trouble, ns)
			delete(w.troubleAt, ns)
		} else if due {
			w.troubleAt[ns] = now
		}
		w.mu.Unlock()
		if !stuck || !due {
			continue
		}
		why := w.podTrouble(ctx, ns)
		w.mu.Lock()
		changed := w.trouble[ns] != why
		w.trouble[ns] = why
		w.mu.Unlock()
		if changed {
			for _, run := range w.board.WaitingRuns(ns) {
				w.wake(types.NamespacedName{Namespace: ns, Name: run.Session})
			}
		}
	}
}

// podTrouble says what is wrong with namespace's worker pods, "" if
// nothing is seen (they may just be starting).
func (w *PoolWorkers) podTrouble(ctx context.Context, namespace string) string {
	pods := &corev1.PodList{}
	if err := w.Reader.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels(w.Settings.labels())); err != nil {
		return ""
	}
	if len(pods.Items) == 0 {
		return fmt.Sprintf("no worker pod exists yet (Deployment %s)", w.Settings.name())
	}
	for _, pod := range pods.Items {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
				return derived.Truncate(fmt.Sprintf("pod %s is not scheduled: %s", pod.Name, c.Message), 300)
			}
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if wt := cs.State.Waiting; wt != nil && wt.Reason != "" && wt.Reason != "ContainerCreating" {
				msg := fmt.Sprintf("pod %s: %s", pod.Name, wt.Reason)
				if last := cs.LastTerminationState.Terminated; last != nil {
					msg += fmt.Sprintf(" (last exit %d, %s)", last.ExitCode, last.Reason)
				}
				if wt.Message != "" {
					msg += ": " + wt.Message
				}
				return derived.Truncate(msg, 300)
			}
		}
	}
	return ""
}

// podsFor is how many pods busy runs need, within NamespaceRuns.
func (w *PoolWorkers) podsFor(busy int) int32 {
	if w.NamespaceRuns > 0 {
		busy = min(busy, w.NamespaceRuns)
	}
	per := w.Settings.RunsPerPod
	return int32((busy + per - 1) / per)
}

// apply gives namespace n worker pods: its Secret and Deployment, or,
// for 0, neither.
func (w *PoolWorkers) apply(ctx context.Context, namespace string, n int32) error {
	if n == 0 {
		for _, obj := range []client.Object{
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: w.Settings.name()}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: w.Settings.name()}},
		} {
			if err := w.Client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete %T %s: %w", obj, obj.GetName(), err)
			}
		}
		return nil
	}
	specs := poolSpecs(namespace, n, w.Settings, w.tokens.Token(namespace))
	if err := w.ensure(ctx, specs.secret, func(have, want client.Object) bool {
		h, wt := have.(*corev1.Secret), want.(*corev1.Secret)
		if equality.Semantic.DeepEqual(h.Data, wt.Data) {
			return false
		}
		h.Data = wt.Data
		return true
	}); err != nil {
		return err
	}
	return w.ensure(ctx, specs.deployment, func(have, want client.Object) bool {
		h, wt := have.(*appsv1.Deployment), want.(*appsv1.Deployment)
		if ptr.Deref(h.Spec.Replicas, 1) == *wt.Spec.Replicas && equality.Semantic.DeepDerivative(wt.Spec.Template, h.Spec.Template) {
			return false
		}
		h.Spec = wt.Spec
		return true
	})
}

// ensure creates want, or updates the object there if update changes it.
func (w *PoolWorkers) ensure(ctx context.Context, want client.Object, update func(have, want client.Object) bool) error {
	err := w.Client.Create(ctx, want)
	if err == nil || !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("create %s %s: %w", kindOf(want), want.GetName(), err)
		}
		return nil
	}
	have := want.DeepCopyObject().(client.Object)
	if err := w.Reader.Get(ctx, client.ObjectKeyFromObject(want), have); err != nil {
		return err
	}
	if !update(have, want) {
		return nil
	}
	if err := w.Client.Update(ctx, have); err != nil {
		return fmt.Errorf("update %s %s: %w", kindOf(want), want.GetName(), err)
	}
	return nil
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *appsv1.Deployment:
		return "Deployment"
	case *corev1.Secret:
		return "Secret"
	}
	return fmt.Sprintf("%T", obj)
}

// Pool metrics. The per-namespace series exist only while a namespace has
// worker pods, so they grow with the busy namespaces, not all of them.
var (
	poolPods = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "turnlog_worker_pods",
		Help: "Worker pods the manager keeps in a namespace (pod worker mode).",
	}, []string{"namespace"})
	poolRunsWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "turnlog_worker_runs_waiting",
		Help: "Worker runs of a namespace waiting for a worker pod (pod worker mode).",
	}, []string{"namespace"})
	poolRunsInFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "turnlog_worker_runs_in_flight",
		Help: "Worker runs of a namespace a worker pod is working on (pod worker mode).",
	}, []string{"namespace"})
	poolRunSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "turnlog_worker_run_seconds",
		Help:    "How long a worker run took on a worker pod, from lease to result, by task and outcome (pod worker mode).",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300},
	}, []string{"task", "state"})
	poolRunsLeased = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "turnlog_worker_runs_leased_total",
		Help: "Worker runs handed to a worker pod (pod worker mode).",
	})
	poolRunsLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "turnlog_worker_runs_lost_total",
		Help: "Leases given up because their worker pod stopped answering; each run is done again (pod worker mode).",
	})
)

func init() {
	metrics.Registry.MustRegister(poolPods, poolRunsWaiting, poolRunsInFlight, poolRunSeconds, poolRunsLeased, poolRunsLost)
}
