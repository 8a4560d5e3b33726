package controllers

import (
	"testing"

	"k8s.io/utils/ptr"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// TestForkChildSentKeptThrough: a fork's child that drops refused blocks
// reads the refusal reports before its cut with the layout of the requests
// its source's hosts sent: every block kept by a source that keeps them,
// none after what its own source kept by one that drops them (as a live pi
// does for such a Session).
func TestForkChildSentKeptThrough(t *testing.T) {
	drop := turnlogv1.Adapter{Kind: "pi-ai", RefusedBlocks: turnlog.RefusedBlocksDrop}
	keep := turnlogv1.Adapter{Kind: "pi-ai"}
	for _, c := range []struct {
		name       string
		source     turnlogv1.SessionSpec
		cut        int64
		wantSpec   *int64
		wantWorker int64
	}{
		{"a source that keeps refused blocks", turnlogv1.SessionSpec{Adapter: keep}, 20, nil, 20},
		{"a source that drops them from its start", turnlogv1.SessionSpec{Adapter: drop}, 20, ptr.To[int64](0), 0},
		{"a dropping child of a keeping source", turnlogv1.SessionSpec{Adapter: drop, ForkedFrom: &turnlogv1.ForkOrigin{Session: "a", CutSeq: 12}}, 30, ptr.To[int64](12), 12},
		{"a dropping child of a dropping source", turnlogv1.SessionSpec{Adapter: drop, ForkedFrom: &turnlogv1.ForkOrigin{Session: "a", CutSeq: 12, SentKeptThrough: ptr.To[int64](4)}}, 30, ptr.To[int64](4), 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			source := &turnlogv1.Session{Spec: c.source}
			got := sentKeptThrough(source, c.cut)
			if (got == nil) != (c.wantSpec == nil) || (got != nil && *got != *c.wantSpec) {
				t.Fatalf("spec.forkedFrom.sentKeptThrough = %v, want %v", ptr.Deref(got, -1), ptr.Deref(c.wantSpec, -1))
			}
			child := &turnlogv1.Session{Spec: turnlogv1.SessionSpec{Adapter: drop,
				ForkedFrom: &turnlogv1.ForkOrigin{Session: "src", CutSeq: c.cut, SentKeptThrough: got}}}
			inv := workerInvocation(child, derived.TaskReplay, "file:///s", sessionlog.Location{Namespace: "ns", Session: "child", UID: "u"})
			if inv.SentKeptThrough != c.wantWorker {
				t.Errorf("the replay run is told --sent-kept-through=%d, want %d", inv.SentKeptThrough, c.wantWorker)
			}
		})
	}
}
