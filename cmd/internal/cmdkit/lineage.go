package cmdkit

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/compare"
)

// ForkRecords reads the lineage records of namespace's Sessions from the
// API server, for compare.SharedThrough: what `kubectl turnlog diff` and
// the page's compare start their comparison after.
func ForkRecords(kube client.Reader, namespace string) compare.Records {
	return func(ctx context.Context, name string) (compare.ForkRecord, error) {
		s := &turnlogv1.Session{}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
			return compare.ForkRecord{}, err
		}
		r := compare.ForkRecord{UID: s.LogUID()}
		if from := s.Spec.ForkedFrom; from != nil {
			r.Source, r.SourceUID, r.Cut = from.Session, from.UID, from.CutSeq
		}
		return r, nil
	}
}
