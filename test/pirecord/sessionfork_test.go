package pirecord

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/testutil/controlplane"
	"github.com/turnlog/turnlog/turnlogtest"
)

// TestForkFromPiIsASessionFork: with a kubeconfig and turnlog running (the
// controllers, as on make dev, with a file:// store), /turnlog-fork creates
// a SessionFork: the controller cuts it, the child Session has
// spec.forkedFrom, the child's log is the parent's through the cut, and
// /turnlog-open continues the child in pi with the parent's context through
// the cut.
func TestForkFromPiIsASessionFork(t *testing.T) {
	ctx := context.Background()
	tl, prov, e := recordWithTurnlog(t, "chat-sfork")
	pi := e.Start()
	prov.Queue(
		reply{Blocks: []block{{Kind: "text", Text: "The launch is on Tuesday."}}, Stop: "end_turn"},
		reply{Blocks: []block{{Kind: "text", Text: "Sunny, in the parent."}}, Stop: "end_turn"},
	)
	pi.Prompt("When is the launch?")
	const second = "And what will the weather be?"
	pi.Prompt(second)
	parentSecond := prov.Requests()[1]

	pi.Call(map[string]any{"type": "prompt", "message": "/turnlog-fork 1"})
	// The package creates the Session as it opens the log, which pi does
	// not wait for; the fork waits for all the package has queued.
	var parent turnlogv1.Session
	if err := tl.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "chat-sfork"}, &parent); err != nil {
		t.Fatalf("the package did not create the Session: %v", err)
	}
	if len(pi.Notes) == 0 {
		t.Fatal("/turnlog-fork said nothing")
	}
	said := pi.Notes[len(pi.Notes)-1]
	m := forkedRE.FindStringSubmatch(said)
	if m == nil || m[2] != "default" || m[3] != "chat-sfork-fork-1" || !strings.Contains(said, "(SessionFork chat-sfork-fork-1)") {
		t.Fatalf("/turnlog-fork 1 said %q; want the child chat-sfork-fork-1 and its SessionFork", said)
	}
	// The fork waited for everything pi did to be in the log.
	ref := sessionRef{fileURL: tl.StoreURL, loc: agenthost.Location{Namespace: "default", Session: "chat-sfork", UID: string(parent.UID)}}
	parentLog := ref.export(t)
	cut := int64(-1)
	for _, ev := range validate(t, parentLog) {
		if ev.Type == "turn/end" {
			cut = ev.Seq
			break
		}
	}
	if m[1] != fmt.Sprint(cut) {
		t.Fatalf("/turnlog-fork 1 cut at seq %s; the first turn/end is seq %d", m[1], cut)
	}
	var fork turnlogv1.SessionFork
	if err := tl.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "chat-sfork-fork-1"}, &fork); err != nil {
		t.Fatalf("no SessionFork: %v", err)
	}
	if c := meta.FindStatusCondition(fork.Status.Conditions, turnlogv1.ConditionSucceeded); c == nil || c.Status != "True" || fork.Status.CutSeq == nil || *fork.Status.CutSeq != cut {
		t.Fatalf("SessionFork status %+v: want Succeeded with cut %d", fork.Status, cut)
	}
	var child turnlogv1.Session
	if err := tl.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "chat-sfork-fork-1"}, &child); err != nil {
		t.Fatal(err)
	}
	if f := child.Spec.ForkedFrom; f == nil || f.Session != "chat-sfork" || f.CutSeq != cut || string(child.UID) != m[4] {
		t.Fatalf("child %s (uid %s) forkedFrom %+v: want chat-sfork at %d", child.Name, child.UID, child.Spec.ForkedFrom, cut)
	}
	childRef := sessionRef{fileURL: tl.StoreURL, loc: agenthost.Location{Namespace: "default", Session: child.Name, UID: string(child.UID)}}
	if want := bytes.Join(bytes.SplitAfter(parentLog, []byte("\n"))[:cut+1], nil); !bytes.Equal(childRef.export(t), want) {
		t.Fatalf("the child's log is not the parent's through seq %d", cut)
	}

	// Once the child is replayed, pi continues it with the parent's
	// context through the cut.
	deadline := time.Now().Add(time.Minute)
	for {
		if err := tl.Client.Get(ctx, client.ObjectKeyFromObject(&child), &child); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(child.Status.Conditions, turnlogv1.ConditionReady); c != nil && c.Status == "True" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child is not Ready: %+v", child.Status.Conditions)
		}
		time.Sleep(200 * time.Millisecond)
	}
	pi.Call(map[string]any{"type": "prompt", "message": "/turnlog-open default/chat-sfork-fork-1"})
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "Rainy, in the child."}}, Stop: "end_turn"})
	pi.Prompt(second)
	childFirst := prov.Requests()[2]
	for _, k := range []string{"system", "tools", "messages", "model"} {
		if !reflect.DeepEqual(childFirst[k], parentSecond[k]) {
			t.Errorf("the child's first request differs from the parent's second in %q:\nchild  %v\nparent %v", k, childFirst[k], parentSecond[k])
		}
	}
	pi.Quit()
}

// recordWithTurnlog runs turnlog as make dev does — the controllers with
// local workers on a control plane from `make control-plane`, a file://
// store, namespace default, a short poll — and a pi environment that
// records into Session session through its API server. Without the control
// plane the test is skipped, except under CI=true.
func recordWithTurnlog(t *testing.T, session string) (*turnlogtest.Env, *provider, *env) {
	t.Helper()
	controlplane.SkipIfMissing(t)
	tl := turnlogtest.Start(t, turnlogtest.WithControlPlane(controlplane.Assets()), turnlogtest.WithNamespaces("default"),
		turnlogtest.WithPollInterval(200*time.Millisecond))
	prov := newProvider(t)
	e := newEnv(t, prov, tl.StoreURL, nil, "default", session, "")
	e.Vars = append(e.Vars, "TURNLOG_KUBECONFIG="+tl.Kubeconfig)
	return tl, prov, e
}
