package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// TestWatchdog: a reconcile gets a context that ends at the deadline; one
// that goes on regardless fails the liveness check, once counted, until it
// ends.
func TestWatchdog(t *testing.T) {
	w := newWatchdog(50*time.Millisecond, nil)
	w.grace = 50 * time.Millisecond
	release := make(chan struct{})
	ctxEnded := make(chan time.Duration, 1)
	r := w.watch("session", reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
		began := time.Now()
		<-ctx.Done()
		ctxEnded <- time.Since(began)
		<-release // a call that ignores its context
		return reconcile.Result{}, nil
	}), func() client.Object { return &turnlogv1.Session{} })
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "stuck"}}
	before := testutil.ToFloat64(reconcilesOverdue.WithLabelValues("session"))
	done := make(chan struct{})
	go func() {
		_, _ = r.Reconcile(context.Background(), req)
		close(done)
	}()
	if err := w.Check(nil); err != nil {
		t.Fatalf("check right after the start: %v", err)
	}
	if d := <-ctxEnded; d < 40*time.Millisecond || d > 5*time.Second {
		t.Fatalf("the reconcile's context ended after %s, want about the 50ms deadline", d)
	}
	time.Sleep(100 * time.Millisecond)
	err := w.Check(nil)
	if err == nil || !strings.Contains(err.Error(), "session team-a/stuck") {
		t.Fatalf("check with an overdue reconcile: %v; want it to fail naming session team-a/stuck", err)
	}
	if err := w.Check(nil); err == nil {
		t.Fatal("the second check passed while the reconcile was still overdue")
	}
	if got := testutil.ToFloat64(reconcilesOverdue.WithLabelValues("session")) - before; got != 1 {
		t.Fatalf("turnlog_reconciles_overdue_total rose by %g, want 1 (counted once)", got)
	}
	close(release)
	<-done
	if err := w.Check(nil); err != nil {
		t.Fatalf("check after the reconcile ended: %v", err)
	}
}
