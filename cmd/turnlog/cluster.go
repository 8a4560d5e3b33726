package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/controllers"
	"github.com/turnlog/turnlog/internal/store"
)

// The commands that work on a Session in a cluster. They find the cluster
// as kubectl does (--kubeconfig, $KUBECONFIG, ~/.kube/config, --context,
// --namespace) and write to the Session's object store directly.
func init() {
	register("import", "create a Session (if absent) and write a log file as its log", runImport)
	register("append", "append events (JSON Lines from stdin) to a Session's log", runAppend)
	register("export", "write a Session's log as JSON Lines", runExport)
}

// clusterFlags are the flags every cluster command takes.
type clusterFlags struct {
	kubeconfig, context, namespace, session, storeURL, storePrefix *string
}

func addClusterFlags(fs *flag.FlagSet) clusterFlags {
	f := clusterFlags{
		kubeconfig:  fs.String("kubeconfig", "", "kubeconfig file; default: $KUBECONFIG, then ~/.kube/config"),
		context:     fs.String("context", "", "kubeconfig context; default: the current context"),
		session:     fs.String("session", "", "name of the Session (required)"),
		storeURL:    fs.String("store-url", os.Getenv("TURNLOG_STORE_URL"), "URL of the Session's object store (the one its spec.storage.store names on the manager), with your own credentials in the environment; default: $TURNLOG_STORE_URL"),
		storePrefix: fs.String("store-prefix", os.Getenv("TURNLOG_STORE_PREFIX"), "the prefix the operator configured for that store, if any; default: $TURNLOG_STORE_PREFIX"),
	}
	f.namespace = fs.String("namespace", "", "namespace of the Session; default: the context's")
	fs.StringVar(f.namespace, "n", "", "shorthand for --namespace")
	return f
}

// required reports a missing --session as a usage error (exit code 2).
func (f clusterFlags) required(fs *flag.FlagSet) (int, bool) {
	if *f.session == "" {
		return usageError(fs, errors.New("--session is required")), false
	}
	return 0, true
}

// sessionIO connects to the cluster and returns the namespace to use; a
// command checks f.required first.
func (f clusterFlags) sessionIO() (*controllers.SessionIO, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *f.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *f.context})
	ns := *f.namespace
	if ns == "" {
		var err error
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", err
		}
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(turnlogv1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", err
	}
	if *f.storeURL == "" {
		return nil, "", errors.New("--store-url (or $TURNLOG_STORE_URL) is required")
	}
	if err := store.CheckURL(*f.storeURL); err != nil {
		return nil, "", fmt.Errorf("--store-url: %w", err)
	}
	if p := *f.storePrefix; p != "" {
		if err := store.ValidateKey(p); err != nil {
			return nil, "", fmt.Errorf("--store-prefix %q: %w", p, err)
		}
	}
	// Whatever store the Session names, it is the one at --store-url.
	given := controllers.StoreConfig{URL: *f.storeURL, Prefix: *f.storePrefix}
	return &controllers.SessionIO{Client: c, Stores: &controllers.BucketCache{Any: &given}}, ns, nil
}

// openSession starts a command that works on one Session and takes no
// positional arguments (append, export, transcript): it parses args, checks
// --session and connects. When ok is false the command ends with code, the
// problem already reported on stderr: 2 for a command line it cannot run, 1
// when the cluster or the store cannot be reached. import does these steps
// itself, because it reads and converts its file before it connects.
func (f clusterFlags) openSession(fs *flag.FlagSet, args []string, stderr io.Writer) (sio *controllers.SessionIO, ns string, code int, ok bool) {
	if code, ok := noArgs(fs, args); !ok {
		return nil, "", code, false
	}
	if code, ok := f.required(fs); !ok {
		return nil, "", code, false
	}
	sio, ns, err := f.sessionIO()
	if err != nil {
		return nil, "", fail(stderr, fs.Name(), err), false
	}
	return sio, ns, 0, true
}

func runImport(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("import", "FILE|-", stderr)
	f := addClusterFlags(fs)
	format := fs.String("format", "turnlog", "format of FILE: turnlog (a turn log, JSON Lines) or pi-session (a pi-coding-agent session file)")
	leaf := fs.String("leaf", "", "pi-session: the entry id the imported path ends at (default: the file's last entry)")
	name, code, ok := oneLogArg(fs, args)
	if !ok {
		return code
	}
	if *format != "turnlog" && *format != "pi-session" {
		return usageError(fs, fmt.Errorf("--format %q: want turnlog or pi-session", *format))
	}
	if *leaf != "" && *format != "pi-session" {
		return usageError(fs, errors.New("--leaf is for --format pi-session"))
	}
	if code, ok := f.required(fs); !ok {
		return code
	}
	in, err := openLog(name, stdin)
	if err != nil {
		return fail(stderr, "import", err)
	}
	defer in.Close()
	var log io.Reader = bufio.NewReader(in)
	var annotations map[string]string
	if *format == "pi-session" {
		// Converted before anything is written, so a bad file leaves no
		// Session behind.
		s, err := agenthost.ReadPiSession(log, logName(name), *leaf)
		if err != nil {
			return fail(stderr, "import", err)
		}
		var buf bytes.Buffer
		if err := s.WriteLog(&buf); err != nil {
			return fail(stderr, "import", err)
		}
		log, annotations = &buf, s.Annotations()
	}
	sio, ns, err := f.sessionIO()
	if err != nil {
		return fail(stderr, "import", err)
	}
	_, n, err := sio.ImportAnnotated(ctx, ns, *f.session, log, annotations)
	if err != nil {
		return fail(stderr, "import", fmt.Errorf("%s: %w", logName(name), err))
	}
	fmt.Fprintf(stdout, "session/%s: imported %d events into namespace %s\n", *f.session, n, ns)
	return 0
}

func runAppend(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("append", "< EVENTS.jsonl", stderr)
	f := addClusterFlags(fs)
	sio, ns, code, ok := f.openSession(fs, args, stderr)
	if !ok {
		return code
	}
	first, n, err := sio.Append(ctx, ns, *f.session, bufio.NewReader(stdin))
	if err != nil {
		return fail(stderr, "append", err)
	}
	fmt.Fprintf(stdout, "session/%s: appended seq %d..%d\n", *f.session, first, first+n-1)
	return 0
}

func runExport(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("export", "", stderr)
	f := addClusterFlags(fs)
	sio, ns, code, ok := f.openSession(fs, args, stderr)
	if !ok {
		return code
	}
	w := bufio.NewWriter(stdout)
	if err := sio.Export(ctx, ns, *f.session, w); err != nil {
		return fail(stderr, "export", err)
	}
	if err := w.Flush(); err != nil {
		return fail(stderr, "export", err)
	}
	return 0
}
