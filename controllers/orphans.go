package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
)

// A log that a deleted Session with retention Delete left in the store —
// because its store failed past --deletion-timeout — is recorded as a
// ConfigMap in the manager's own namespace, and a sweep deletes it once the
// store answers again. The record is the only thing the sweep deletes by:
// it never lists a store for roots without a Session, so a log kept by
// retention Retain, or written by a host for a Session that never existed,
// is never touched, and tenants (who cannot write the manager's namespace)
// cannot point the sweep anywhere.

// LabelOrphanedLog marks the ConfigMaps that record orphaned logs.
const LabelOrphanedLog = "turnlog.dev/orphaned-log"

// Keys of an orphaned-log record's data.
const (
	orphanStore     = "store"
	orphanNamespace = "namespace"
	orphanSession   = "session"
	orphanUID       = "uid"
	// orphanLocation is status.location as it was when the Session was
	// released ("" if the store could not even be opened then); the sweep
	// refuses to delete anywhere else.
	orphanLocation = "location"
	orphanReason   = "reason"
	orphanSince    = "since"
	// orphanLastError and orphanLastAttempt say why the last sweep left
	// the log.
	orphanLastError   = "lastError"
	orphanLastAttempt = "lastAttempt"
)

// DefaultOrphanSweepInterval is how often recorded orphaned logs are tried
// again.
const DefaultOrphanSweepInterval = 10 * time.Minute

var orphanedLogs = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "turnlog_orphaned_logs",
	Help: "Logs of deleted Sessions with retention Delete that are recorded as left in their store, as of the last sweep.",
})

func init() { metrics.Registry.MustRegister(orphanedLogs) }

// orphanLedger records orphaned logs and sweeps them.
type orphanLedger struct {
	// Client writes the records; Reader lists them from the API server, so
	// the manager does not cache ConfigMaps.
	Client    client.Client
	Reader    client.Reader
	Recorder  events.EventRecorder
	Stores    Stores
	Namespace string
	Interval  time.Duration
	// Timeout bounds the deletion of one log, as DeletionTimeout bounds it
	// for a Session.
	Timeout time.Duration
	// Shard is the manager's shard, if it has one: its records carry the
	// shard's label, and it sweeps only those.
	Shard string
}

// labels mark the records of this ledger's manager.
func (l *orphanLedger) labels() map[string]string {
	labels := map[string]string{LabelOrphanedLog: "true"}
	if l.Shard != "" {
		labels[turnlogv1.LabelShard] = l.Shard
	}
	return labels
}

// recordName is the record of the Session with this UID.
func recordName(uid string) string { return "turnlog-orphaned-log-" + uid }

// record writes down that session's log was left in the store named
// store; location is status.location, "" if unknown. Recording twice is
// not an error.
func (l *orphanLedger) record(ctx context.Context, session *turnlogv1.Session, store, location, reason string) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: l.Namespace, Name: recordName(session.LogUID()),
			Labels: l.labels(),
		},
		Data: map[string]string{
			orphanStore: store, orphanNamespace: session.Namespace, orphanSession: session.Name, orphanUID: session.LogUID(),
			orphanLocation: location, orphanReason: derived.Truncate(reason, 1024), orphanSince: time.Now().UTC().Format(time.RFC3339),
		},
	}
	if err := l.Client.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("record the orphaned log of Session %s/%s in ConfigMap %s/%s: %w", session.Namespace, session.Name, l.Namespace, cm.Name, err)
	}
	return nil
}

// where is how a record names itself to an operator.
func (l *orphanLedger) where(session *turnlogv1.Session) string {
	return l.Namespace + "/" + recordName(session.LogUID())
}

// Start sweeps at once and then every Interval, until ctx ends.
func (l *orphanLedger) Start(ctx context.Context) error {
	t := time.NewTicker(l.Interval)
	defer t.Stop()
	for {
		l.sweep(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection: only the leader deletes.
func (*orphanLedger) NeedLeaderElection() bool { return true }

// sweep tries each recorded log once.
func (l *orphanLedger) sweep(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx).WithName("orphan-sweep")
	list := &corev1.ConfigMapList{}
	if err := l.Reader.List(ctx, list, client.InNamespace(l.Namespace), client.MatchingLabels(l.labels())); err != nil {
		log.Error(err, "listing the records of orphaned logs", "namespace", l.Namespace)
		return
	}
	left := 0
	for i := range list.Items {
		if ctx.Err() != nil {
			return
		}
		if !l.sweepOne(ctx, &list.Items[i]) {
			left++
		}
	}
	orphanedLogs.Set(float64(left))
}

// sweepOne deletes the log a record names and then the record; it reports
// whether it did. A log it cannot delete is left with the reason in the
// record, and tried again at the next sweep.
func (l *orphanLedger) sweepOne(ctx context.Context, cm *corev1.ConfigMap) bool {
	log := ctrl.LoggerFrom(ctx).WithName("orphan-sweep").WithValues("record", cm.Name)
	d := cm.Data
	name := d[orphanStore]
	session := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: d[orphanNamespace], Name: d[orphanSession], UID: types.UID(d[orphanUID])}}
	tctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()

	// where is the log's location, once the store says it.
	where := ""
	deleted, err := func() (int, error) {
		st, err := l.Stores.Store(tctx, name)
		if err != nil {
			return 0, err
		}
		loc := st.Location(session)
		where = statusLocation(name, loc)
		if recorded := d[orphanLocation]; recorded != "" && recorded != where {
			return 0, &misplacedError{recorded: recorded, now: where}
		}
		return st.Logs.Delete(tctx, loc, sessionLiveness(l.Reader))
	}()
	if err != nil {
		var msg string
		if misplaced, ok := errors.AsType[*misplacedError](err); ok {
			msg = misplaced.Error()
		} else {
			msg = storeProblem(ctx, name, "deleting the orphaned log of Session "+session.Namespace+"/"+session.Name, err).message
		}
		l.noteFailure(ctx, cm, msg)
		log.Info("orphaned log left for the next sweep", "reason", msg)
		return false
	}
	l.Recorder.Eventf(cm, nil, corev1.EventTypeNormal, turnlogv1.EventOrphanedLogDeleted, "Sweep",
		"deleted the log Session %s/%s left at %s (%d objects)", session.Namespace, session.Name, where, deleted)
	if err := l.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); client.IgnoreNotFound(err) != nil {
		// The next sweep finds the root empty and tries again.
		log.Error(err, "deleting the record of a deleted orphaned log")
	}
	log.Info("deleted an orphaned log", "location", where, "objects", deleted)
	return true
}

// noteFailure keeps in the record why the log is still there; failing to
// must not stop the sweep.
func (l *orphanLedger) noteFailure(ctx context.Context, cm *corev1.ConfigMap, msg string) {
	base := cm.DeepCopy()
	cm.Data[orphanLastError] = derived.Truncate(msg, 1024)
	cm.Data[orphanLastAttempt] = time.Now().UTC().Format(time.RFC3339)
	if err := l.Client.Patch(ctx, cm, client.MergeFrom(base)); client.IgnoreNotFound(err) != nil {
		ctrl.LoggerFrom(ctx).Error(err, "noting why an orphaned log was left", "record", cm.Name)
	}
}

// misplacedError: the store's configuration now puts the log elsewhere
// than where it was left (its prefix changed), so deleting could remove
// another log; the operator must look.
type misplacedError struct{ recorded, now string }

func (e *misplacedError) Error() string {
	return fmt.Sprintf("the log was left at %s, but the store's configuration now puts it at %s; delete it by hand and then this record", e.recorded, e.now)
}
