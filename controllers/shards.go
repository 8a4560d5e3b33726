package controllers

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/workerpool"
)

// A shard is the part of the Sessions and SessionForks one manager
// reconciles: those labelled turnlog.dev/shard=NAME, for a manager started
// with --shard=NAME (docs/scaling.md, "Past one manager: shards"). Its
// cache holds only them, it elects its leader with a Lease of its own, its
// worker pods and orphan records carry the label, and its metrics the
// label shard=NAME. A manager without a shard reconciles every object, as
// it always has.

// ValidateShard refuses a shard name that cannot be a label value and a
// part of the names of the shard's Lease and worker Deployments.
func ValidateShard(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("shard %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// ShardCacheOptions makes opts cache only shard's Sessions and
// SessionForks; shard "" leaves them as they are. The other objects the
// manager reads (worker Deployments and pods, orphan records) it reads
// from the API server, selected by the shard's label.
func ShardCacheOptions(opts cache.Options, shard string) cache.Options {
	if shard == "" {
		return opts
	}
	selector := labels.SelectorFromSet(labels.Set{turnlogv1.LabelShard: shard})
	byObject := make(map[client.Object]cache.ByObject, len(opts.ByObject)+2)
	maps.Copy(byObject, opts.ByObject)
	byObject[&turnlogv1.Session{}] = cache.ByObject{Label: selector}
	byObject[&turnlogv1.SessionFork{}] = cache.ByObject{Label: selector}
	opts.ByObject = byObject
	return opts
}

// LeaderElectionID is the name of the Lease the replicas of shard's
// manager elect their leader with; shard "" is the one manager's.
func LeaderElectionID(shard string) string {
	if shard == "" {
		return "turnlog-manager.turnlog.dev"
	}
	return "turnlog-manager-shard-" + shard + ".turnlog.dev"
}

// ShardMetrics labels every metric the process serves on its metrics
// endpoint with shard=NAME (controller-runtime's as well as turnlog's), so
// that a dashboard can pick a shard and an alert can name it. It replaces
// controller-runtime's registry, and must be called before the manager
// starts its metrics server.
func ShardMetrics(shard string) {
	metrics.Registry = shardRegistry{RegistererGatherer: metrics.Registry, shard: shard}
}

// shardRegistry adds the label shard to what its registry gathers.
type shardRegistry struct {
	metrics.RegistererGatherer
	shard string
}

const shardMetricLabel = "shard"

func (r shardRegistry) Gather() ([]*dto.MetricFamily, error) {
	families, err := r.RegistererGatherer.Gather()
	name := shardMetricLabel
	for _, f := range families {
		for _, m := range f.Metric {
			m.Label = append(m.Label, &dto.LabelPair{Name: &name, Value: &r.shard})
			slices.SortFunc(m.Label, func(a, b *dto.LabelPair) int { return cmp.Compare(a.GetName(), b.GetName()) })
		}
	}
	return families, err
}

// HandoverGrace is how long a manager of one shard waits before it starts
// the first worker run of a Session that has just come into its shard
// from another: the Session's previous manager lets go of its runs when
// the Session leaves its cache, and a worker pod learns that at its next
// heartbeat (every 2 s) and stops; a lease lives this long without one. A
// run inside a manager is cancelled at once.
const HandoverGrace = workerpool.DefaultLeaseTimeout

// handover is what the Session controller of one shard keeps to take
// Sessions over from other shards, and give them up, without two runs of
// one Session at once.
type handover struct {
	shard string
	grace time.Duration
	// arrivals are when Sessions another manager had reconciled came into
	// the cache, after the initial list, by UID, until their grace is
	// over.
	arrivals sync.Map
}

// shardMoves notes, as the Session controller's watch sees them, the
// Sessions that come into the shard and those that leave it: deleted, or
// relabelled into another shard (the API server's watch, which selects on
// the label, reports that as a deletion). It filters nothing; it is a
// predicate so that an arrival is noted before the reconcile it causes is
// queued.
func (r *SessionReconciler) shardMoves() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			if session, ok := e.Object.(*turnlogv1.Session); ok && !e.IsInInitialList && len(session.Status.Conditions) > 0 {
				r.handover.arrivals.Store(session.UID, time.Now())
			}
			return true
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			if session, ok := e.Object.(*turnlogv1.Session); ok {
				r.letGo(context.Background(), session)
			}
			return true
		},
	}
}

// handingOver reports whether run must wait because its Session has just
// come from another shard, whose manager may still be letting go of a run
// of it; if so it says so in the Ready condition and looks again when the
// grace is over.
func (r *SessionReconciler) handingOver(s *sessionScope, run WorkerRun) bool {
	wait := r.handoverWait(s.session.UID)
	if wait <= 0 {
		return false
	}
	s.ready = &condition{turnlogv1.ReasonWorkPending, fmt.Sprintf(
		"%s run %s starts in %s: the Session has just come into shard %s, and a run its previous shard had going must stop first",
		run.Task, run.Name, wait.Round(time.Second), r.handover.shard)}
	s.result.RequeueAfter = wait
	return true
}

// handoverWait is how long writes of the Session with uid must still
// wait because it has just come from another shard, or 0.
func (r *SessionReconciler) handoverWait(uid types.UID) time.Duration {
	if r.handover == nil {
		return 0
	}
	since, ok := r.handover.arrivals.Load(uid)
	if !ok {
		return 0
	}
	wait := r.handover.grace - time.Since(since.(time.Time))
	if wait <= 0 {
		r.handover.arrivals.Delete(uid)
		return 0
	}
	return wait
}

// movedAway reports whether session has left this manager's shard while it
// was reconciled (the cache no longer holds it): its new manager writes its
// status from now on, and what this reconcile may have started after the
// Session left is let go of again.
func (r *SessionReconciler) movedAway(ctx context.Context, session *turnlogv1.Session) bool {
	if r.handover == nil {
		return false
	}
	current := &turnlogv1.Session{}
	err := r.Get(ctx, client.ObjectKeyFromObject(session), current)
	if err == nil && current.UID == session.UID || err != nil && !apierrors.IsNotFound(err) {
		return false
	}
	r.letGo(ctx, session)
	return true
}

// letGo forgets session: its runs are taken off this manager's workers (a
// worker pod holding one stops at its next heartbeat, a run inside the
// manager is cancelled) and what the reconciler remembers of it is
// dropped.
func (r *SessionReconciler) letGo(ctx context.Context, session *turnlogv1.Session) {
	if err := r.Workers.Forget(ctx, session); err != nil {
		logf.FromContext(ctx).Error(err, "letting go of the runs of a Session that left the shard", "session", client.ObjectKeyFromObject(session))
	}
	r.forget(session.UID)
	r.handover.arrivals.Delete(session.UID)
}

// sessionReader is where the SessionFork controller reads Sessions: the
// cache, unless the manager caches only its shard's, as the source and the
// child of a fork may be in other shards.
func (r *SessionForkReconciler) sessionReader() client.Reader {
	if r.Sessions != nil {
		return r.Sessions
	}
	return r.Client
}
