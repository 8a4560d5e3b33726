package main

import (
	"context"
	"fmt"
	"io"

	"k8s.io/client-go/tools/clientcmd"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
	"github.com/turnlog/turnlog/internal/adopt"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
)

func init() {
	register("adopt", "create the Sessions a store holds in this cluster again, and point restored Sessions at their logs (docs/backup-restore.md)", runAdopt)
}

// runAdopt is `turnlog adopt`: for a cluster that lost its Sessions (a new
// control plane, a namespace deleted and restored from a backup), every
// Session the store's manifests describe, back with its name, spec and
// lineage, reading its log where it is.
func runAdopt(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("adopt", "", stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; default: $KUBECONFIG, then ~/.kube/config")
	kubeContext := fs.String("context", "", "kubeconfig context; default: the current context")
	var sf cmdkit.StoreFlags
	sf.Add(fs)
	storeName := fs.String("store", turnlogv1.DefaultStore, "the name the manager gives the store at --store-url: only Sessions whose spec.storage.store names it are adopted")
	namespace := fs.String("namespace", "", "adopt the Sessions of this namespace only; default: every namespace in the store")
	fs.StringVar(namespace, "n", "", "shorthand for --namespace")
	dryRun := fs.Bool("dry-run", false, "list what would be created or restored, and do nothing")
	qps := fs.Float64("kube-qps", 100, "requests a second to the API server (bursts of twice that); adopt makes about two a Session")
	if code, ok := noArgs(fs, args); !ok {
		return code
	}
	if sf.URL == "" {
		return usageError(fs, fmt.Errorf("--store-url (or $TURNLOG_STORE_URL) is required"))
	}
	if err := store.CheckURL(sf.URL); err != nil {
		return usageError(fs, fmt.Errorf("--store-url: %w", err))
	}
	if sf.Prefix != "" {
		if err := store.ValidateKey(sf.Prefix); err != nil {
			return usageError(fs, fmt.Errorf("--store-prefix %q: %w", sf.Prefix, err))
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *kubeContext})
	// Two requests a Session: at client-go's default of 5 a second, a
	// store of 10,000 Sessions would take over an hour.
	kube, _, err := cmdkit.ClientAt(cc, *namespace, float32(*qps))
	if err != nil {
		return fail(stderr, "adopt", err)
	}
	b, err := store.Open(ctx, sf.URL, nil)
	if err != nil {
		return fail(stderr, "adopt", err)
	}
	defer b.Close()
	report, err := adopt.Run(ctx, adopt.Options{
		Kube: kube, Logs: sessionlog.New(b), Prefix: sf.Prefix, Store: *storeName,
		Namespace: *namespace, DryRun: *dryRun, Out: stdout,
	})
	verb := "created"
	if *dryRun {
		verb = "would create"
	}
	fmt.Fprintf(stdout, "adopt: %s %d Sessions and %d namespaces, restored %d, %d already adopted, %d left in the store, %d refused, %d without a manifest\n",
		verb, report.Created, report.Namespaces, report.Restored, report.Adopted, report.Skipped, report.Refused, report.NoManifest)
	if err != nil {
		return fail(stderr, "adopt", err)
	}
	return 0
}
