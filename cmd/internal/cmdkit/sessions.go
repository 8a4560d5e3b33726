package cmdkit

import (
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// CauseSeqs are the degraded seqs of one cause.
type CauseSeqs struct {
	Cause string  `json:"cause"`
	Seqs  []int64 `json:"seqs"`
}

// DegradedCauses are the non-empty lists of d, in the order the API
// documents the causes.
func DegradedCauses(d turnlogv1.DegradedSeqs) []CauseSeqs {
	all := []CauseSeqs{{"kind", d.Kind}, {"version", d.Version}, {"malformed", d.Malformed}, {"shape", d.Shape}}
	return slices.DeleteFunc(all, func(c CauseSeqs) bool { return len(c.Seqs) == 0 })
}

// SessionEvents lists the Events about the Session and about the
// SessionForks whose source it is, oldest first.
func SessionEvents(ctx context.Context, kube client.Client, ns, name string) ([]corev1.Event, error) {
	objects := []struct{ kind, name string }{{"Session", name}}
	forks := &turnlogv1.SessionForkList{}
	if err := kube.List(ctx, forks, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for _, f := range forks.Items {
		if f.Spec.Source.Name == name {
			objects = append(objects, struct{ kind, name string }{"SessionFork", f.Name})
		}
	}
	var out []corev1.Event
	for _, obj := range objects {
		list := &corev1.EventList{}
		if err := kube.List(ctx, list, client.InNamespace(ns),
			client.MatchingFields{"involvedObject.kind": obj.kind, "involvedObject.name": obj.name}); err != nil {
			return nil, err
		}
		out = append(out, list.Items...)
	}
	slices.SortStableFunc(out, func(a, b corev1.Event) int { return LastSeen(a).Compare(LastSeen(b)) })
	return out, nil
}

// LastSeen is when the Event last happened, whichever API wrote it.
func LastSeen(e corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	default:
		return e.CreationTimestamp.Time
	}
}

// ForkGenerateName is the prefix the API server completes with 5
// characters into a fork's name, which the child takes: a Session name is
// at most 253 characters.
func ForkGenerateName(source string) string {
	const suffix = "-fork-"
	if limit := 253 - 5 - len(suffix); len(source) > limit {
		source = strings.TrimRight(source[:limit], "-.")
	}
	return source + suffix
}
