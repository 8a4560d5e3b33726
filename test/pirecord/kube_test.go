package pirecord

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/testutil/controlplane"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// startAPIServer starts kube-apiserver and etcd with turnlog's CRDs and
// returns a client and a kubeconfig file for pi; without the control
// plane's binaries it skips, except in CI.
func startAPIServer(t *testing.T) (client.Client, string) {
	t.Helper()
	controlplane.SkipIfMissing(t)
	cp := controlplane.Start(t, filepath.Join("..", ".."), controlplane.Options{User: "pi-user"})
	return cp.Client, cp.Kubeconfig
}

// TestSessionThroughTheAPIServer: with a kubeconfig, the package creates
// the Session by name (its spec.adapter pi's model, and pi's next model
// after a model change), records into the log of the uid the API server
// gave it, nudges it after each turn, and forks into a child Session named
// without its uid.
func TestSessionThroughTheAPIServer(t *testing.T) {
	kube, kubeconfig := startAPIServer(t)
	gw := versitygw.Start(t)
	prov := newProvider(t)
	e := newEnv(t, prov, gw.URL, gw, "default", "chat-kube", "")
	e.Vars = append(e.Vars, "TURNLOG_KUBECONFIG="+kubeconfig)
	pi := e.Start()
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "Hello from the cluster."}}, Stop: "end_turn"})
	pi.Prompt("Hello?")

	ctx := context.Background()
	var session turnlogv1.Session
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: "chat-kube"}, &session)
		if err == nil && session.Annotations[turnlogv1.AnnotationRequestedAt] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no nudged Session default/chat-kube after 30 s (%v): %+v", err, session.ObjectMeta)
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := turnlogv1.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "fake", Model: "model-a", ReleaseLine: "1"}
	if session.Spec.Adapter != want {
		t.Errorf("the Session's spec.adapter is %+v, want %+v", session.Spec.Adapter, want)
	}
	// A model change retargets the Session: its transcript is replayed for
	// the model pi talks to now.
	pi.Call(map[string]any{"type": "set_model", "provider": "fake", "modelId": "model-b"})
	want.Model = "model-b"
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: "chat-kube"}, &session); err == nil && session.Spec.Adapter == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after /model, the Session's spec.adapter is %+v, want %+v", session.Spec.Adapter, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ref := sessionRef{gw: gw, loc: agenthost.Location{Namespace: "default", Session: "chat-kube", UID: string(session.UID)}}
	waitTurns(t, ref, 1)
	events := validate(t, ref.export(t))

	// A child Session that exists, named without its uid.
	child := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "chat-kube-child"}}
	if err := kube.Create(ctx, child); err != nil {
		t.Fatal(err)
	}
	pi.Call(map[string]any{"type": "prompt", "message": "/turnlog-fork 1 default/chat-kube-child"})
	if last := pi.Notes[len(pi.Notes)-1]; !strings.HasSuffix(last, fmt.Sprintf("into default/chat-kube-child/%s", child.UID)) {
		t.Fatalf("/turnlog-fork: %s", last)
	}
	// A last turn, and pi quits at once: the turn is written as pi closes,
	// and its nudge has reached the API server when pi has exited, so
	// that the manager replays it now and not at its next poll.
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "Goodbye."}}, Stop: "end_turn"})
	lastTurn := time.Now()
	pi.Prompt("Bye?")
	pi.Quit()
	if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: "chat-kube"}, &session); err != nil {
		t.Fatal(err)
	}
	if at, err := time.Parse(time.RFC3339Nano, session.Annotations[turnlogv1.AnnotationRequestedAt]); err != nil || at.Before(lastTurn) {
		t.Errorf("when pi has exited, the Session was last nudged at %q, before its last turn (%s)", session.Annotations[turnlogv1.AnnotationRequestedAt], lastTurn.UTC().Format(time.RFC3339Nano))
	}
	childRef := sessionRef{gw: gw, loc: agenthost.Location{Namespace: "default", Session: "chat-kube-child", UID: string(child.UID)}}
	childEvents := validate(t, childRef.export(t))
	if last := childEvents[len(childEvents)-1]; last.Type != turnlog.TypeTurnEnd || len(childEvents) > len(events) {
		t.Fatalf("the child's log (%d events) is not the parent's first turn (%d events)", len(childEvents), len(events))
	}
	t.Logf("Session default/chat-kube (uid %s): %d events, nudged at %s; child %d events", session.UID, len(events), session.Annotations[turnlogv1.AnnotationRequestedAt], len(childEvents))
}
