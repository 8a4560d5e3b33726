// Package adopt rebuilds a cluster's Sessions from what the store holds
// (docs/backup-restore.md): each Session's manifest, which the manager
// writes beside its log, becomes the Session again, pointed at that log
// (spec.storage.logUID), with its name, labels, spec and lineage. A
// Session restored from a backup with a new uid and no log of its own is
// pointed at its old log the same way. Nothing in the store is written:
// the Sessions' status comes, as always, from their logs and the derived
// data the workers already stored.
package adopt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
)

// Options say what to adopt and where.
type Options struct {
	// Kube is the cluster the Sessions are created in.
	Kube client.Client
	// Logs is the store, and Prefix the prefix the manager's store
	// configuration names ("" for none).
	Logs   *sessionlog.Store
	Prefix string
	// Store is the name the manager gives this store: only Sessions whose
	// spec.storage.store names it are adopted.
	Store string
	// Namespace, if not "", is the only namespace adopted.
	Namespace string
	// DryRun lists what would be done and does nothing.
	DryRun bool
	// Out gets one line per Session adopted, restored, skipped or refused.
	Out io.Writer
}

// Report counts what Run did (or, in a dry run, would do).
type Report struct {
	// Created: Sessions created from their manifests; Restored: existing
	// Sessions with no log of their own pointed at their old one.
	Created, Restored int
	// Adopted: Sessions already reading their log, left alone.
	Adopted int
	// Skipped: logs left in the store (an older Session of the name, a
	// name held by a Session with another log, another store's Session).
	Skipped int
	// Refused: manifests that could not be adopted, each reported with an
	// Event; NoManifest: logs written before manifests were.
	Refused, NoManifest int
	// Namespaces created for the Sessions adopted into them.
	Namespaces int
}

// Run adopts every Session the store holds under opts.Prefix. It reads the
// store's listing once, one name at a time (the roots of a name are next
// to each other in key order), so its memory does not grow with the
// number of Sessions. It never overwrites: a Session that exists and
// reads another log is reported and left alone; running it twice does
// nothing the second time.
func Run(ctx context.Context, opts Options) (Report, error) {
	if opts.Store == "" {
		opts.Store = turnlogv1.DefaultStore
	}
	a := &adopter{Options: opts, namespaces: map[string]bool{}}
	var group []sessionlog.Root
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		err := a.adoptName(ctx, group)
		group = group[:0]
		return err
	}
	for root, err := range opts.Logs.Roots(ctx, opts.Prefix, opts.Namespace) {
		if err != nil {
			return a.report, err
		}
		if len(group) > 0 && (group[0].Location.Namespace != root.Location.Namespace || group[0].Location.Session != root.Location.Session) {
			if err := flush(); err != nil {
				return a.report, err
			}
		}
		group = append(group, root)
	}
	return a.report, flush()
}

type adopter struct {
	Options
	report     Report
	namespaces map[string]bool // known to exist (or, in a dry run, to be created)
}

// found is one root of a name whose manifest reads, and the Session to
// create from it.
type found struct {
	root    sessionlog.Root
	session *turnlogv1.Session
}

// adoptName adopts one Session name from its roots: the newest of those
// whose manifest reads, a root with a log before one without.
func (a *adopter) adoptName(ctx context.Context, roots []sessionlog.Root) error {
	var candidates []found
	for _, r := range roots {
		loc := r.Location
		switch {
		case r.Deleted:
			continue // kept for its children's pins: its Session was deleted
		case !r.Manifest:
			if r.Log {
				a.report.NoManifest++
				a.printf("%s/%s: the log at uid %s has no session.json (written before the manager kept manifests): not adopted; a Session of this name with spec.storage.logUID %s reads it", loc.Namespace, loc.Session, loc.UID, loc.UID)
			}
			continue
		}
		lg, err := a.Logs.Log(loc)
		if err != nil {
			return err
		}
		data, err := lg.Manifest(ctx)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted since the listing
		}
		if _, bad := errors.AsType[*sessionlog.DataError](err); bad {
			a.refuse(ctx, loc, err.Error())
			continue
		}
		if err != nil {
			return err
		}
		s, _, err := sessionio.ReadManifest(data, loc)
		if err != nil {
			a.refuse(ctx, loc, err.Error())
			continue
		}
		candidates = append(candidates, found{root: r, session: s})
	}
	if len(candidates) == 0 {
		return nil
	}
	// The Session to adopt: one with a log over one without, then the
	// most recently created.
	slices.SortStableFunc(candidates, func(x, y found) int {
		if x.root.Log != y.root.Log {
			if x.root.Log {
				return -1
			}
			return 1
		}
		return y.session.CreationTimestamp.Compare(x.session.CreationTimestamp.Time)
	})
	chosen := candidates[0]
	for _, other := range candidates[1:] {
		if !other.root.Log {
			// A manifest alone: a Session that never had a log (or one
			// restored and pointed elsewhere): nothing is left behind.
			continue
		}
		a.report.Skipped++
		a.printf("%s/%s: the log at uid %s is an earlier Session's of this name: left in the store, not adopted", other.root.Location.Namespace, other.root.Location.Session, other.root.Location.UID)
	}
	if store := chosen.session.Spec.Storage.StoreName(); store != a.Store {
		a.report.Skipped++
		a.printf("%s/%s: names store %q, not %q: left to an adoption from that store", chosen.session.Namespace, chosen.session.Name, store, a.Store)
		return nil
	}
	return a.adopt(ctx, chosen)
}

// adopt creates the Session, or points an existing one that has no log of
// its own at chosen's.
func (a *adopter) adopt(ctx context.Context, chosen found) error {
	want := chosen.session
	key := client.ObjectKeyFromObject(want)
	loc := chosen.root.Location
	created := func() error {
		a.report.Created++
		a.printf("session/%s created in namespace %s from the log at uid %s%s", want.Name, want.Namespace, loc.UID, lineage(want))
		return nil
	}
	have := &turnlogv1.Session{}
	var err error
	if a.DryRun {
		if err = a.Kube.Get(ctx, key, have); apierrors.IsNotFound(err) {
			if err := a.ensureNamespace(ctx, want.Namespace); err != nil {
				return err
			}
			return created()
		}
	} else {
		// Created first, looked at only when the name is taken: a
		// cluster that lost its Sessions has none of them, and one
		// request a Session is half the time of two.
		if err := a.ensureNamespace(ctx, want.Namespace); err != nil {
			return err
		}
		err = a.Kube.Create(ctx, want.DeepCopy())
		switch {
		case err == nil:
			return created()
		case apierrors.IsAlreadyExists(err):
			err = a.Kube.Get(ctx, key, have)
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
			a.refuse(ctx, loc, "the API server refused the Session: "+err.Error())
			return nil
		default:
			return fmt.Errorf("create Session %s: %w", key, err)
		}
	}
	switch {
	case err != nil:
		return fmt.Errorf("get Session %s: %w", key, err)
	case have.LogUID() == loc.UID:
		a.report.Adopted++
		a.printf("session/%s in namespace %s already reads the log at uid %s", want.Name, want.Namespace, loc.UID)
		return nil
	}
	// A Session of this name exists and reads another root: a restore
	// (its uid new, its log empty) is pointed at the old log; anything
	// else keeps its own.
	own := loc
	own.UID = have.LogUID()
	ownLog, err := a.Logs.Log(own)
	if err != nil {
		return err
	}
	head, err := ownLog.Head(ctx)
	if err != nil {
		return fmt.Errorf("read the log of Session %s (uid %s): %w", key, own.UID, err)
	}
	switch {
	case head.Head() >= 0 || have.Spec.Storage.LogUID != "":
		a.report.Skipped++
		a.printf("%s/%s: held by a Session (uid %s) with a log of its own: the log at uid %s is left in the store", want.Namespace, want.Name, have.UID, loc.UID)
		return nil
	case have.Spec.Storage.StoreName() != want.Spec.Storage.StoreName():
		a.report.Skipped++
		a.printf("%s/%s: held by a Session of store %q: the log at uid %s (store %q) is left in the store", want.Namespace, want.Name, have.Spec.Storage.StoreName(), loc.UID, want.Spec.Storage.StoreName())
		return nil
	}
	if !a.DryRun {
		patch := client.MergeFrom(have.DeepCopy())
		have.Spec.Storage.LogUID = loc.UID
		if err := a.Kube.Patch(ctx, have, patch); err != nil {
			if apierrors.IsInvalid(err) {
				a.refuse(ctx, loc, "the API server refused spec.storage.logUID: "+err.Error())
				return nil
			}
			return fmt.Errorf("point Session %s at the log at uid %s: %w", key, loc.UID, err)
		}
	}
	a.report.Restored++
	a.printf("session/%s in namespace %s restored: it had no log of its own (uid %s) and now reads the log at uid %s", want.Name, want.Namespace, have.UID, loc.UID)
	return nil
}

// ensureNamespace creates namespace if it does not exist.
func (a *adopter) ensureNamespace(ctx context.Context, namespace string) error {
	if a.namespaces[namespace] {
		return nil
	}
	err := a.Kube.Get(ctx, client.ObjectKey{Name: namespace}, &corev1.Namespace{})
	switch {
	case err == nil:
	case apierrors.IsNotFound(err):
		if !a.DryRun {
			if err := a.Kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create namespace %s: %w", namespace, err)
			}
		}
		a.report.Namespaces++
		a.printf("namespace/%s created", namespace)
	default:
		return fmt.Errorf("get namespace %s: %w", namespace, err)
	}
	a.namespaces[namespace] = true
	return nil
}

// refuse reports a manifest that cannot be adopted: a line, and a Warning
// Event on the Session's name in its namespace (when the namespace
// exists), which is where its owners look.
func (a *adopter) refuse(ctx context.Context, loc sessionlog.Location, why string) {
	a.report.Refused++
	a.printf("%s/%s: not adopted: %s", loc.Namespace, loc.Session, why)
	if a.DryRun {
		return
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: loc.Session + ".adopt-", Namespace: loc.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: turnlogv1.GroupVersion.String(), Kind: "Session", Namespace: loc.Namespace, Name: loc.Session,
		},
		Reason: "AdoptionRefused", Message: truncate(why, 1024), Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "turnlog-adopt"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	_ = a.Kube.Create(ctx, ev) // the line above said it; an Event is a courtesy
}

func (a *adopter) printf(format string, args ...any) {
	if a.Out == nil {
		return
	}
	if a.DryRun {
		format = "(dry run) " + format
	}
	fmt.Fprintf(a.Out, format+"\n", args...)
}

// lineage says which Session s was forked from, if any.
func lineage(s *turnlogv1.Session) string {
	if f := s.Spec.ForkedFrom; f != nil {
		return fmt.Sprintf(", forked from %s at seq %d", f.Session, f.CutSeq)
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
