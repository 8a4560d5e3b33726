// Command host is a minimal agent host written against the public
// agenthost package: it creates a Session, streams two turns into its log
// through an Appender — the second one stopped by the user mid-answer —,
// waits for the transcript the workers replay, forks the Session at the
// stopped turn with a SessionFork, and prints the child's transcript: what
// the child's first request would be built from.
//
// The model is simulated (the stream is made up here), so it runs without
// a provider account:
//
//	go run ./host --kubeconfig $KUBECONFIG -n default --store-url file://$PWD/.turnlog-dev/store
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

var model = agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	namespace := flag.String("n", "default", "namespace of the Sessions")
	storeURL := flag.String("store-url", os.Getenv("TURNLOG_STORE_URL"), "URL of the object store the Sessions' logs are in (the manager's default store)")
	storePrefix := flag.String("store-prefix", os.Getenv("TURNLOG_STORE_PREFIX"), "the prefix the operator configured for that store, if any")
	name := flag.String("session", fmt.Sprintf("host-demo-%d", time.Now().Unix()), "name of the Session to create")
	timeout := flag.Duration("timeout", 3*time.Minute, "how long to wait for the workers")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := run(ctx, *kubeconfig, *namespace, *storeURL, *storePrefix, *name); err != nil {
		fmt.Fprintln(os.Stderr, "host:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, ns, storeURL, storePrefix, name string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := turnlogv1.AddToScheme(scheme); err != nil {
		return err
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	st, err := agenthost.OpenStore(ctx, storeURL, &agenthost.StoreOptions{Prefix: storePrefix})
	if err != nil {
		return err
	}
	defer st.Close()

	log, err := st.CreateSession(ctx, kube, ns, name, model)
	if err != nil {
		return err
	}
	a := log.Appender(agenthost.AppenderOptions{})
	if err := a.Add(ctx, agenthost.SessionStart(model)); err != nil {
		return err
	}

	// Turn 1: a complete answer, reasoning signed by the provider.
	err = a.Add(ctx,
		agenthost.TurnStart(1),
		agenthost.UserText(1, "What is the capital of France?"),
		agenthost.ResponseStart(1, 0, model),
		agenthost.ThinkingDelta(1, 0, 0, "A geography question.", false))
	if err != nil {
		return err
	}
	// Deltas are added as the stream delivers them; the Appender writes
	// them every 100 ms, and at once at the finish.
	for _, piece := range []string{"The capital ", "of France ", "is Paris."} {
		if err := a.Add(ctx, agenthost.TextDelta(1, 0, 1, piece)); err != nil {
			return err
		}
	}
	err = a.Add(ctx,
		agenthost.ResponseFinish(1, 0, agenthost.StopReasonStop, &agenthost.Envelope{
			Response: map[string]string{"id": "msg_demo_1"},
			Blocks:   []*agenthost.BlockState{{Type: "thinking", Signature: "sig-think-1"}, {Type: "text", Signature: "sig-text-1"}},
		}, nil),
		agenthost.TurnEnd(1, agenthost.StopReasonStop))
	if err != nil {
		return err
	}

	// Turn 2: the user stops the answer half way; its frozen partial text
	// stays out of every transcript.
	err = a.Add(ctx,
		agenthost.TurnStart(2),
		agenthost.UserText(2, "And of Spain? Explain its history at length."),
		agenthost.ResponseStart(2, 0, model),
		agenthost.TextDelta(2, 0, 0, "Madrid became the capital in 1561, when"),
		agenthost.ResponseFinish(2, 0, agenthost.StopReasonAborted, nil, nil),
		agenthost.TurnEnd(2, agenthost.StopReasonAborted))
	if err != nil {
		return err
	}
	if err := a.Close(ctx); err != nil {
		return err
	}
	head, err := log.Head(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("session/%s: streamed 2 turns, seq 0..%d (turn 2 aborted)\n", name, head.Next-1)

	tr, err := log.WaitTranscript(ctx, head.LastTurnEnd)
	if err != nil {
		return err
	}
	fmt.Printf("session/%s: replayed through seq %d: %d messages (%d native)\n", name, tr.ThroughSeq, len(tr.Messages), tr.Counts.Native)

	// Fork at the stopped turn's frozen node, as a UI renders it.
	atSeq := fmt.Sprintf("%.1f", float64(head.LastTurnEnd)-0.9)
	child, cut, err := st.Fork(ctx, kube, ns, name, atSeq, name+"-retry")
	if err != nil {
		return err
	}
	fmt.Printf("sessionfork/%s-retry: at %s, cut at seq %d\n", name, atSeq, cut)
	ct, err := child.WaitTranscript(ctx, cut)
	if err != nil {
		return err
	}
	fmt.Printf("session/%s-retry: transcript through seq %d:\n", name, ct.ThroughSeq)
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(ct)
}
