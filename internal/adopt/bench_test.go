package adopt_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/adopt"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/controlplane"
	"github.com/turnlog/turnlog/internal/testutil/heappeak"
)

// BenchmarkAdopt is `turnlog adopt` of a whole store into a cluster that
// has none of its Sessions: a real API server, a file:// store of N
// Sessions in 10 namespaces, each a manifest, a segment and a checkpoint.
// It reports the Sessions adopted a second and the peak heap over the
// run (docs/benchmarks.md, "Adopting a store"):
//
//	go test ./internal/adopt -run '^$' -bench Adopt -benchtime 1x
func BenchmarkAdopt(b *testing.B) {
	controlplane.SkipIfMissing(b)
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ctx := context.Background()
			bucket, err := store.Open(ctx, "file://"+b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer bucket.Close()
			logs := sessionlog.New(bucket)
			for i := range n {
				s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{
					Namespace: fmt.Sprintf("team-%d", i%10), Name: fmt.Sprintf("chat-%05d", i), UID: types.UID(fmt.Sprintf("uid-%05d", i)),
					Labels: map[string]string{"app": "support"}, CreationTimestamp: metav1.Now(),
				}, Spec: turnlogv1.SessionSpec{Retention: turnlogv1.RetentionDelete}}
				lg, err := logs.Log(sessionio.Location("", s))
				if err != nil {
					b.Fatal(err)
				}
				data, err := sessionio.Manifest(s)
				if err != nil {
					b.Fatal(err)
				}
				if err := lg.PutManifest(ctx, data); err != nil {
					b.Fatal(err)
				}
				if _, err := lg.NewAppender("host").Append(ctx, []byte(`{"type":"session/start"}`)); err != nil {
					b.Fatal(err)
				}
				if err := lg.PutDerived(ctx, "assembly/checkpoint.json", []byte(`{}`)); err != nil {
					b.Fatal(err)
				}
			}
			for range b.N {
				cp := controlplane.Start(b, "../..", controlplane.Options{QPS: 100, Burst: 200}) // turnlog adopt's --kube-qps
				var report adopt.Report
				peak, took := heappeak.Over(1<<30, func() {
					report, err = adopt.Run(ctx, adopt.Options{Kube: cp.Client, Logs: logs, Out: io.Discard})
				})
				if err != nil {
					b.Fatal(err)
				}
				if report.Created != n || report.Namespaces != 10 {
					b.Fatalf("adopted %+v, want %d Sessions in 10 namespaces", report, n)
				}
				b.ReportMetric(float64(n)/took.Seconds(), "sessions/s")
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			}
		})
	}
}
