package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
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
	kubeconfig, context, namespace, session *string
	store                                   cmdkit.StoreFlags
}

func addClusterFlags(fs *flag.FlagSet) *clusterFlags {
	f := &clusterFlags{
		kubeconfig: fs.String("kubeconfig", "", "kubeconfig file; default: $KUBECONFIG, then ~/.kube/config"),
		context:    fs.String("context", "", "kubeconfig context; default: the current context"),
		session:    fs.String("session", "", "name of the Session (required)"),
	}
	f.store.Add(fs)
	f.namespace = fs.String("namespace", "", "namespace of the Session; default: the context's")
	fs.StringVar(f.namespace, "n", "", "shorthand for --namespace")
	return f
}

// required reports a missing --session as a usage error (exit code 2).
func (f *clusterFlags) required(fs *flag.FlagSet) (int, bool) {
	if *f.session == "" {
		return usageError(fs, errors.New("--session is required")), false
	}
	return 0, true
}

// connect connects to the cluster and the store and returns the namespace
// to use; a command checks f.required first.
func (f *clusterFlags) connect(ctx context.Context) (client.Client, *agenthost.Store, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *f.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *f.context})
	kube, ns, err := cmdkit.Client(cc, *f.namespace)
	if err != nil {
		return nil, nil, "", err
	}
	st, err := f.store.Open(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	return kube, st, ns, nil
}

// openSession starts a command that works on one Session and takes no
// positional arguments (append, export, transcript): it parses args, checks
// --session, connects and opens the Session's log. When ok is false the
// command ends with code, the problem already reported on stderr: 2 for a
// command line it cannot run, 1 when the cluster, the Session or the store
// cannot be reached. import does these steps itself, because it reads and
// converts its file before it connects.
func (f *clusterFlags) openSession(ctx context.Context, fs *flag.FlagSet, args []string, stderr io.Writer) (log *agenthost.Log, ns string, code int, ok bool) {
	if code, ok := noArgs(fs, args); !ok {
		return nil, "", code, false
	}
	if code, ok := f.required(fs); !ok {
		return nil, "", code, false
	}
	kube, st, ns, err := f.connect(ctx)
	if err == nil {
		log, err = st.OpenSession(ctx, kube, ns, *f.session)
	}
	if err != nil {
		return nil, "", fail(stderr, fs.Name(), err), false
	}
	return log, ns, 0, true
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
	// Read and checked before anything is written, so a bad file leaves
	// no Session behind.
	var events []agenthost.Event
	var annotations map[string]string
	if *format == "pi-session" {
		s, err := agenthost.ReadPiSession(bufio.NewReader(in), logName(name), *leaf)
		if err != nil {
			return fail(stderr, "import", err)
		}
		events, annotations = s.Events, s.Annotations()
	} else if events, err = agenthost.ReadEvents(bufio.NewReader(in), 0); err != nil {
		return fail(stderr, "import", fmt.Errorf("%s: %w", logName(name), err))
	}
	kube, st, ns, err := f.connect(ctx)
	if err != nil {
		return fail(stderr, "import", err)
	}
	_, err = st.ImportSession(ctx, kube, ns, *f.session, events, annotations)
	if written, ok := errors.AsType[*agenthost.AlreadyWrittenError](err); ok {
		err = fmt.Errorf("Session %s/%s already has %d events; use `turnlog append` to add to its log", ns, *f.session, written.Events)
	}
	if err != nil {
		return fail(stderr, "import", fmt.Errorf("%s: %w", logName(name), err))
	}
	fmt.Fprintf(stdout, "session/%s: imported %d events into namespace %s\n", *f.session, len(events), ns)
	return 0
}

func runAppend(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("append", "< EVENTS.jsonl", stderr)
	f := addClusterFlags(fs)
	log, _, code, ok := f.openSession(ctx, fs, args, stderr)
	if !ok {
		return code
	}
	first, n, err := log.AppendFrom(ctx, bufio.NewReader(stdin))
	if err != nil {
		return fail(stderr, "append", err)
	}
	fmt.Fprintf(stdout, "session/%s: appended seq %d..%d\n", *f.session, first, first+n-1)
	return 0
}

func runExport(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("export", "", stderr)
	f := addClusterFlags(fs)
	log, _, code, ok := f.openSession(ctx, fs, args, stderr)
	if !ok {
		return code
	}
	if err := cmdkit.Export(ctx, log, stdout); err != nil {
		return fail(stderr, "export", err)
	}
	return 0
}
