package main

import (
	"context"
	"io"
	"net"
	"strconv"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
	"github.com/turnlog/turnlog/cmd/internal/ui"
)

func init() {
	register("ui", "serve a web page on 127.0.0.1 that shows Sessions, compares them and forks them from any message", runUI)
}

func runUI(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("ui", "", stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; default: $KUBECONFIG, then ~/.kube/config")
	kubeContext := fs.String("context", "", "kubeconfig context; default: the current context")
	namespace := fs.String("namespace", "", "namespace the Sessions page opens on; default: the context's")
	fs.StringVar(namespace, "n", "", "shorthand for --namespace")
	address := fs.String("address", "127.0.0.1", "address to listen on; anything but loopback lets others act with your credentials")
	port := fs.Int("port", 8765, "port to listen on (0: any free port)")
	var store cmdkit.StoreFlags
	store.Add(fs)
	if code, ok := noArgs(fs, args); !ok {
		return code
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *kubeContext})
	kube, ns, err := cmdkit.Client(cc, *namespace)
	if err != nil {
		return fail(stderr, "ui", err)
	}
	var st *agenthost.Store
	if store.URL != "" {
		if st, err = store.Open(ctx); err != nil {
			return usageError(fs, err)
		}
		defer st.Close()
	}
	addr := net.JoinHostPort(*address, strconv.Itoa(*port))
	if err := ui.Run(ctx, addr, ui.Options{Kube: kube, Namespace: ns, Store: st}, stdout, stderr); err != nil {
		return fail(stderr, "ui", err)
	}
	return 0
}
