package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"strings"
	"time"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/telemetry"
	"github.com/turnlog/turnlog/internal/workerpool"
)

// Environment of a worker pod: what the manager's Deployment gives it.
const (
	// EnvToken holds the namespace's token (from the Secret turnlog-worker).
	EnvToken = "TURNLOG_WORKER_TOKEN"
	// EnvCA holds the PEM certificate the manager's endpoint presents.
	EnvCA = "TURNLOG_WORKER_CA"
	// EnvPod is the pod's own name, for status.worker.pod.
	EnvPod = "POD_NAME"
)

// Serve is `turnlog worker serve`, the entrypoint of a worker pod: it
// takes its namespace's runs from the manager (workerpool) and does each
// as `turnlog worker assemble|replay` would, until it is stopped. It
// returns the process exit code: 0 stopped, 1 refused by the manager, 2
// usage.
func Serve(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("worker serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "the manager's worker endpoint, https://HOST:PORT")
	namespace := fs.String("namespace", "", "the namespace whose runs this pod takes")
	runs := fs.Int("runs", 1, "runs this pod works on at once")
	var otlp telemetry.Flags
	otlp.Bind(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: turnlog worker serve --endpoint URL --namespace NS [--runs N]\n(%s and %s from the environment)\n", EnvToken, EnvCA)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	token, ca, pod := os.Getenv(EnvToken), os.Getenv(EnvCA), os.Getenv(EnvPod)
	switch {
	case fs.NArg() > 0 || *endpoint == "" || *namespace == "":
		fmt.Fprintln(stderr, "turnlog worker serve: --endpoint and --namespace are required, and nothing else")
		return 2
	case token == "" || ca == "":
		fmt.Fprintf(stderr, "turnlog worker serve: %s and %s must be set (the manager's Secret turnlog-worker)\n", EnvToken, EnvCA)
		return 2
	case *runs < 1:
		fmt.Fprintf(stderr, "turnlog worker serve: --runs %d: must be at least 1\n", *runs)
		return 2
	case otlp.Check() != nil:
		fmt.Fprintf(stderr, "turnlog worker serve: %v\n", otlp.Check())
		return 2
	}
	if pod == "" {
		pod, _ = os.Hostname()
	}
	client, err := workerpool.NewClient(*endpoint, *namespace, pod, token, []byte(ca))
	if err != nil {
		fmt.Fprintf(stderr, "turnlog worker serve: %v\n", err)
		return 2
	}
	// A pod keeps each store it opens for its life: a run is milliseconds
	// of work, opening a store client several times that. Its runs on a
	// dead store fail at once once it is known to be dead, and their
	// Sessions back off (WorkerFailed), instead of each run spending its
	// deadline on retries.
	stores := store.NewBuckets(store.BucketsOptions{
		Guard: func(url string) store.GuardOptions { return store.GuardOptions{Name: bucketName(url)} },
	})
	defer func() { _ = stores.Close() }()
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s turnlog worker: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, a...))
	}
	tel, err := telemetry.Start(ctx, otlp, "turnlog-worker")
	if err != nil {
		logf("exporting no traces: %v", err)
	}
	defer func() { _ = tel.Shutdown(ctx) }()
	logf("taking namespace %s's runs from %s as pod %s, %d at a time", *namespace, *endpoint, pod, *runs)
	err = workerpool.Serve(ctx, client, workerpool.ServeOptions{
		Runs: *runs, Logf: logf,
		Execute: func(ctx context.Context, args []string) (string, error) {
			return executeArgs(ctx, args, *namespace, openIn(stores))
		},
	})
	if errors.Is(err, workerpool.ErrUnauthorized) {
		fmt.Fprintf(stderr, "turnlog worker serve: %v: the manager restarted with new credentials; this pod is replaced by one that holds them\n", err)
		return 1
	}
	return 0
}

// executeArgs runs one worker command line a pool pod was handed, for
// namespace only: the summary as its result carries it, or the failure.
func executeArgs(ctx context.Context, args []string, namespace string, open Opener) (string, error) {
	var usage strings.Builder
	if len(args) == 0 || args[0] != "worker" {
		return "", fmt.Errorf("not a worker command line: %q", args)
	}
	inv, err := ParseArgs(args[1:], &usage)
	if err != nil {
		return "", fmt.Errorf("worker command line %q: %s", args, strings.TrimSpace(usage.String()))
	}
	if inv.Location.Namespace != namespace {
		return "", fmt.Errorf("a run of namespace %s handed to a worker of namespace %s", inv.Location.Namespace, namespace)
	}
	sum, err := Execute(ctx, inv, open)
	if err != nil {
		return "", fmt.Errorf("%s %s: %v", inv.Task, inv.Location, err)
	}
	return string(summaryMessage(sum)), nil
}

// openIn opens a run's log in stores, which keep the store open after
// the run.
func openIn(stores *store.Buckets) Opener {
	return func(ctx context.Context, url string, loc sessionlog.Location) (derived.Log, func() error, error) {
		b, err := stores.Bucket(ctx, url)
		if err != nil {
			return nil, nil, err
		}
		log, err := sessionlog.New(b).Log(loc)
		if err != nil {
			return nil, nil, err
		}
		return derived.StoreLog{Log: log}, func() error { return nil }, nil
	}
}

// bucketName names the store at url in a run's errors: its bucket, never
// its endpoint.
func bucketName(rawURL string) string {
	if u, err := neturl.Parse(rawURL); err == nil && u.Host != "" {
		return u.Host
	}
	return "the run's store"
}
