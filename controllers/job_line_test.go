package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/worker"
)

// TestJobLineFirstComeFirstServed: in a namespace at its worker Job limit,
// the slot a finished Job frees goes to the Session that waited for it,
// not to the Session whose Job finished and that wants another at once
// (its host is still appending); the Job finishing wakes the Session that
// waited, and a Job deleted unfinished does too.
func TestJobLineFirstComeFirstServed(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := batchv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	var woken []types.NamespacedName
	w := &JobWorkers{Client: c, Reader: c, Settings: JobSettings{Image: "turnlog:test"}, NamespaceRuns: 1,
		line: jobLine{wake: func(k types.NamespacedName) { woken = append(woken, k) }}}
	run := func(session, name string) WorkerRun {
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: session, UID: types.UID(session + "-uid")}}
		return WorkerRun{Session: s, Name: name, Invocation: worker.Invocation{Task: derived.TaskAssemble}}
	}
	start := func(r WorkerRun) WorkerOutcome {
		t.Helper()
		out, err := w.Run(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	if out := start(run("busy", "busy-1")); out.Queued {
		t.Fatalf("the namespace's first run waits: %s", out.Message)
	}
	out := start(run("child", "child-1"))
	if !out.Queued || out.Message != "namespace team has 1 worker Jobs going (--namespace-worker-runs=1)" {
		t.Fatalf("a run over --namespace-worker-runs=1: %+v", out)
	}

	job := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "busy-1"}, job); err != nil {
		t.Fatal(err)
	}
	running := job.DeepCopy()
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	if err := c.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
	w.slotEvents().Update(ctx, event.UpdateEvent{ObjectOld: running, ObjectNew: job}, nil)
	if len(woken) != 1 || woken[0].Name != "child" {
		t.Fatalf("woken %v; want the Session that waited", woken)
	}
	if out := start(run("busy", "busy-1")); !out.Done {
		t.Fatalf("the finished Job: %+v", out)
	}
	out = start(run("busy", "busy-2"))
	if !out.Queued || !strings.Contains(out.Message, "has 0 worker Jobs going and 1 Session waiting ahead of this one") {
		t.Fatalf("the Session whose Job just finished took the slot from the one that waited: %+v", out)
	}
	if out := start(run("child", "child-1")); out.Queued {
		t.Fatalf("the Session that waited still waits: %s", out.Message)
	}
	if out := start(run("busy", "busy-2")); !out.Queued || !strings.HasPrefix(out.Message, "namespace team has 1 worker Jobs going (") {
		t.Fatalf("busy, first in line, over the limit: %+v", out)
	}

	child := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "child-1"}, child); err != nil {
		t.Fatal(err)
	}
	w.slotEvents().Delete(ctx, event.DeleteEvent{Object: child}, nil)
	if len(woken) != 2 || woken[1].Name != "busy" {
		t.Fatalf("woken %v; want busy, at the front, when the Job going was deleted", woken)
	}
	w.slotEvents().Update(ctx, event.UpdateEvent{ObjectOld: job, ObjectNew: job}, nil)
	if len(woken) != 2 {
		t.Fatalf("woken %v by a finished Job's update", woken)
	}
}

// TestJobLinePlaces: places are kept in the order first asked, asking
// again keeps one's place, free slots admit that many from the front, a
// Session ahead that has not asked lately is passed but keeps its place,
// and a place is lost by not asking for lineGrace, by not answering a wake
// within wakeGrace, or by leaving. Only the front of the line looks again
// every slotRetry.
func TestJobLinePlaces(t *testing.T) {
	now := time.Unix(0, 0)
	var woken []string
	l := &jobLine{now: func() time.Time { return now }, wake: func(k types.NamespacedName) { woken = append(woken, k.Name) }}
	who := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "team", Name: name} }
	admit := func(name string, free int) (bool, int) {
		t.Helper()
		ok, ahead, retry := l.admit(who(name), free, 2)
		if want := slotRetry; !ok && ahead >= 2 {
			if retry != lineRetry {
				t.Fatalf("%s, %d ahead, looks again after %s; want %s", name, ahead, retry, lineRetry)
			}
		} else if retry != want {
			t.Fatalf("%s, %d ahead, looks again after %s; want %s", name, ahead, retry, want)
		}
		return ok, ahead
	}
	for i, name := range []string{"a", "b", "c", "d"} {
		if ok, ahead := admit(name, 0); ok || ahead != i {
			t.Fatalf("%s with no slot free: admitted %v, %d ahead; want a place with %d ahead", name, ok, ahead, i)
		}
	}
	if ok, ahead := admit("c", 1); ok || ahead != 2 {
		t.Fatalf("c, third, with one slot free: admitted %v, %d ahead", ok, ahead)
	}
	if ok, _ := admit("b", 2); !ok {
		t.Fatal("b, second, with two slots free, waits")
	}
	if ok, _, _ := l.admit(types.NamespacedName{Namespace: "other", Name: "x"}, 1, 2); !ok {
		t.Fatal("another namespace's line held a Session back")
	}
	l.leave(who("a"))
	if ok, ahead := admit("e", 1); ok || ahead != 2 {
		t.Fatalf("e, new, behind c and d: admitted %v, %d ahead", ok, ahead)
	}

	l.freed("team")
	if len(woken) != 1 || woken[0] != "c" {
		t.Fatalf("woken %v; want c, at the front", woken)
	}
	now = now.Add(wakeGrace + time.Second)
	if ok, _ := admit("d", 1); !ok {
		t.Fatal("c, woken and silent past wakeGrace, held the slot")
	}

	now = now.Add(lineGrace / 2)
	if ok, ahead := admit("e", 0); ok || ahead != 0 {
		t.Fatalf("e asking again: admitted %v, %d ahead", ok, ahead)
	}
	if ok, ahead := admit("f", 0); ok || ahead != 1 {
		t.Fatalf("f, new: admitted %v, %d ahead", ok, ahead)
	}
	now = now.Add(time.Second)
	if ok, _ := admit("f", 1); ok {
		t.Fatal("f went ahead of e, which is asking")
	}
	now = now.Add(activeWindow + time.Second)
	if ok, _ := admit("f", 1); !ok {
		t.Fatal("e, not asking for longer than activeWindow, held a free slot")
	}
	if ok, ahead := admit("e", 0); ok || ahead != 0 {
		t.Fatalf("e, passed, lost its place: admitted %v, %d ahead", ok, ahead)
	}
	now = now.Add(lineGrace + time.Second)
	if ok, _ := admit("g", 1); !ok {
		t.Fatal("e's place, not asked for in lineGrace, held the slot")
	}
	if len(l.waiting) != 0 {
		t.Fatalf("lines left behind: %v", l.waiting)
	}
}
