// Command kubectl-turnlog is the kubectl plugin for turnlog: on PATH, it
// runs as `kubectl turnlog ...` and answers an operator's day-to-day
// questions about Sessions — which are degraded and why, where a
// conversation can be forked, what a fork's child starts from, how two
// branches differ, what the workers replayed — with kubectl's connection
// flags. It is built from the
// same packages as the turnlog command (agenthost and internal/cmdkit), so
// `kubectl turnlog log` and `transcript` print what `turnlog export` and
// `turnlog transcript` print.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a command line the plugin cannot run: exit code 2, as
// turnlog's own commands.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }

// run runs the plugin with args and returns the exit code: 0 success, 1
// failure, 2 usage error. Every error is one line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &options{overrides: &clientcmd.ConfigOverrides{}}
	root := newRoot(o)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	name := "kubectl turnlog"
	if cmd != nil && cmd != root {
		name += " " + cmd.Name()
	}
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "%s: interrupted\n", name)
		return 130
	}
	fmt.Fprintf(stderr, "%s: %s\n", name, strings.ReplaceAll(err.Error(), "\n", " "))
	if _, ok := errors.AsType[usageError](err); ok {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", name)
		return 2
	}
	return 1
}

// options are the flags every subcommand takes: kubectl's connection flags
// and the object store's.
type options struct {
	kubeconfig string
	overrides  *clientcmd.ConfigOverrides
	store      cmdkit.StoreFlags
}

func newRoot(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:         "turnlog",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl turnlog"},
		Short:       "Look at turnlog Sessions: degraded replay, fork points, forks and how they differ, transcripts, logs and Events",
		Long: `kubectl turnlog answers questions about turnlog Sessions in a namespace.

sessions, fork and events need only the cluster. fork-points, diff, transcript
and log also read the Session's object store, with your own credentials: give
its URL with --store-url (or $TURNLOG_STORE_URL), and --store-prefix if the
operator configured one for it.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	// Without a subcommand the plugin prints its help; an unknown one is a
	// usage error (cobra would report it as a failure).
	root.Args = cobra.ArbitraryArgs
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("unknown command %q", args[0])}
		}
		return cmd.Help()
	}
	flags := root.PersistentFlags()
	flags.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file; default: $KUBECONFIG, then ~/.kube/config")
	clientcmd.BindOverrideFlags(o.overrides, flags, clientcmd.RecommendedConfigOverrideFlags(""))
	storeFlags := flag.NewFlagSet("store", flag.ContinueOnError)
	o.store.Add(storeFlags)
	flags.AddGoFlagSet(storeFlags)
	root.AddCommand(sessionsCommand(o), forkPointsCommand(o), forkCommand(o), diffCommand(o), transcriptCommand(o), exportCommand(o), eventsCommand(o), uiCommand(o))
	return root
}

// kube connects to the cluster as kubectl would with the same flags.
func (o *options) kube() (client.WithWatch, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, o.overrides)
	return cmdkit.Client(cc, o.overrides.Context.Namespace)
}

// session connects to the cluster and the store and opens the log of the
// Session name.
func (o *options) session(ctx context.Context, name string) (*agenthost.Log, client.Client, string, error) {
	st, err := o.store.Open(ctx)
	if err != nil {
		return nil, nil, "", usageError{err}
	}
	kube, ns, err := o.kube()
	if err != nil {
		return nil, nil, "", err
	}
	log, err := st.OpenSession(ctx, kube, ns, name)
	if err != nil {
		return nil, nil, "", err
	}
	return log, kube, ns, nil
}

// noArgs checks that a command got no arguments.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("takes no arguments, got %q", args)}
	}
	return nil
}

// oneSession checks for the single SESSION argument.
func oneSession(_ *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageError{fmt.Errorf("want one SESSION (the name of a Session), got %d arguments", len(args))}
	}
	return nil
}

// logCommand is a command that prints what the store holds for one
// Session, as the turnlog command prints it.
func logCommand(o *options, use, short string, print func(ctx context.Context, log *agenthost.Log, ns, name string, w io.Writer) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  oneSession,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, _, ns, err := o.session(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return print(cmd.Context(), log, ns, args[0], cmd.OutOrStdout())
		},
	}
}

func transcriptCommand(o *options) *cobra.Command {
	return logCommand(o, "transcript SESSION", "Print the transcript the workers stored for the Session (JSON, as `turnlog transcript`)",
		func(ctx context.Context, log *agenthost.Log, ns, name string, w io.Writer) error {
			return cmdkit.Transcript(ctx, log, ns, name, agenthost.Adapter{}, w)
		})
}

func exportCommand(o *options) *cobra.Command {
	return logCommand(o, "log SESSION", "Print the Session's log (JSON Lines, as `turnlog export`)",
		func(ctx context.Context, log *agenthost.Log, _, _ string, w io.Writer) error {
			return cmdkit.Export(ctx, log, w)
		})
}
