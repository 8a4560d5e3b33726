package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/worker"
)

// WorkerRun is one worker task over one Session's log, named
// deterministically from what it works on, so a restarted manager finds the
// run it started instead of starting another.
type WorkerRun struct {
	Session *turnlogv1.Session
	Name    string
	// Invocation is everything the worker is told, through its command
	// line on a worker pod and in this process alike.
	worker.Invocation
	// Store is the name of the Session's store, the one Invocation.StoreURL
	// opens.
	Store string
	// Log is the log at Invocation.Location, opened in this process with
	// the manager's credentials: what a local run reads.
	Log derived.Log
}

// WorkerOutcome is where a run stands.
type WorkerOutcome struct {
	// Done: the run finished and its results are in the store.
	Done bool
	// Failed: the last attempt, identified by Attempt, failed for Message.
	// It stays failed (or done) until Retry.
	Failed  bool
	Attempt string
	Message string
	// Queued: the run could not start because a limit on runs at once was
	// reached (Message says which); it is not an attempt. RetryAfter, if
	// set, is when to look again instead of slotRetry.
	Queued     bool
	RetryAfter time.Duration
	// Waiting: the run waits for a worker pod of its namespace (pod
	// mode), and Message says what is wrong with the pods if something is;
	// Pod is the pod that holds or finished it.
	Waiting bool
	Pod     string
}

// Workers runs worker tasks: in-process (LocalWorkers) or on worker pods
// that stay while a namespace is busy (PoolWorkers).
type Workers interface {
	// Run starts the run or reports on it; it may return before the run is
	// done, and is called again on the next reconcile.
	Run(ctx context.Context, run WorkerRun) (WorkerOutcome, error)
	// Retry clears a finished attempt (failed, or done but found short),
	// so that the next Run starts another.
	Retry(ctx context.Context, run WorkerRun) error
	// Busy reports the name of a run of session that is still going, other
	// than name, so that at most one runs per Session.
	Busy(ctx context.Context, session *turnlogv1.Session, name string) (string, error)
	// Forget removes what is left of session's runs, on deletion.
	Forget(ctx context.Context, session *turnlogv1.Session) error
}

// runName is a run's deterministic name: a DNS label naming the Session
// and the task, and a hash of what makes the run unique: the Session's
// UID, the log position it catches up with, and its command line. A
// manager that tells its workers something new (a flag it used to leave
// out, a moved store) therefore starts a new run with fresh attempts
// rather than inheriting the failures of a command it no longer runs.
func runName(session *turnlogv1.Session, inv worker.Invocation, position string) string {
	task := inv.Task
	sum := sha256.Sum256([]byte(string(session.UID) + "/" + string(task) + "/" + position + "\x00" + inv.Digest()))
	name := strings.TrimRight(session.Name, "-.")
	if len(name) > 40 {
		name = strings.TrimRight(name[:40], "-.")
	}
	name = strings.ReplaceAll(name, ".", "-")
	return fmt.Sprintf("%s-%s-%s", name, task, hex.EncodeToString(sum[:5]))
}

// LocalWorkers runs the worker in the manager's process, one run at a time
// per Session (the reconciler never runs a Session twice at once), and
// within its slots: what the manager holds for runs is bounded by the
// number it runs at once, whatever the number of Sessions. It is for
// machines without a kubelet and for tests.
type LocalWorkers struct {
	slots slots
	// running cancels the run going for each Session (by key), for
	// Forget.
	running sync.Map
}

// Run runs the task to completion, if a slot is free. The run reads the
// store with the manager's credentials, so its error reaches status in
// storeProblem's stable words, the details only the manager's log.
func (w *LocalWorkers) Run(ctx context.Context, run WorkerRun) (WorkerOutcome, error) {
	ns := run.Session.Namespace
	if ok, limit := w.slots.tryAcquire(client.ObjectKeyFromObject(run.Session)); !ok {
		return WorkerOutcome{Queued: true, Message: limit}, nil
	}
	defer w.slots.release(ns)
	key := client.ObjectKeyFromObject(run.Session)
	runCtx, cancel := context.WithCancel(ctx)
	w.running.Store(key, cancel)
	defer w.running.Delete(key)
	defer cancel()
	began := time.Now()
	_, err := runInProcess(runCtx, run)
	localRunSeconds.WithLabelValues(string(run.Task)).Observe(time.Since(began).Seconds())
	if err != nil && runCtx.Err() != nil && ctx.Err() == nil {
		// Forgotten: the Session left the manager's shard, and its new
		// manager runs it.
		return WorkerOutcome{Failed: true, Attempt: fmt.Sprintf("local-%d", time.Now().UnixNano()), Message: "the run was stopped: the Session left this manager's shard"}, nil
	}
	if err != nil {
		msg := storeProblem(ctx, run.Store, fmt.Sprintf("%s run %s", run.Task, run.Name), err).message
		return WorkerOutcome{Failed: true, Attempt: fmt.Sprintf("local-%d", time.Now().UnixNano()), Message: msg}, nil
	}
	return WorkerOutcome{Done: true, Attempt: fmt.Sprintf("local-%d", time.Now().UnixNano())}, nil
}

// localRunSeconds: a local run holds a slot of the manager's for its whole
// length, so it is what another namespace's run may wait behind. (A worker
// pod's runs are in turnlog_worker_run_seconds.)
var localRunSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "turnlog_local_worker_run_seconds",
	Help:    "How long a worker run inside the manager (--worker-mode=local) took, by task; each held a local worker slot that long.",
	Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300},
}, []string{"task"})

func init() { metrics.Registry.MustRegister(localRunSeconds) }

// runInProcess runs the command line a worker pod would be handed for
// run, parsed as the worker pod parses it, on the log this process holds for the run. The
// log must be the one the command line names: a field lost on the way
// shows here, in every envtest spec that replays, not only in pods.
func runInProcess(ctx context.Context, run WorkerRun) (derived.Summary, error) {
	args := run.Args()
	var usage strings.Builder
	inv, err := worker.ParseArgs(args[1:], &usage)
	if err != nil {
		return derived.Summary{}, fmt.Errorf("worker command line %q: %s", args, strings.TrimSpace(usage.String()))
	}
	held := func(_ context.Context, url string, loc sessionlog.Location) (derived.Log, func() error, error) {
		if url != run.StoreURL || loc != run.Location {
			return nil, nil, fmt.Errorf("the worker command line names store %s location %s; the manager holds %s location %s",
				url, loc, run.StoreURL, run.Location)
		}
		return run.Log, func() error { return nil }, nil
	}
	return worker.Execute(ctx, inv, held)
}

// Retry has nothing to clear: every Run is a new attempt.
func (*LocalWorkers) Retry(context.Context, WorkerRun) error { return nil }

// Busy is always false: a local run ends before Run returns.
func (*LocalWorkers) Busy(context.Context, *turnlogv1.Session, string) (string, error) {
	return "", nil
}

// Forget cancels session's run if one is going: a run is done inside the
// reconcile that started it, so only a Session that left the manager's
// shard during that reconcile has one.
func (w *LocalWorkers) Forget(_ context.Context, session *turnlogv1.Session) error {
	if cancel, ok := w.running.Load(client.ObjectKeyFromObject(session)); ok {
		cancel.(context.CancelFunc)()
	}
	return nil
}
