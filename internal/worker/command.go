package worker

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// maxTerminationMessage is the kubelet's limit on a termination message.
const maxTerminationMessage = 4096

// Command is `turnlog worker assemble|replay [flags]`, the entrypoint of a
// worker pod: it runs the task over the Session's log, prints the Summary
// as JSON, and leaves it (or the failure) in the termination message file.
// It returns the process exit code: 0 success, 1 failure, 2 usage.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: turnlog worker assemble|replay --store-url URL --namespace NS --session NAME --uid UID [flags]")
		fs.PrintDefaults()
	}
	var loc sessionlog.Location
	var target turnlog.Adapter
	storeURL := fs.String("store-url", "", "object store holding the log (s3://, gs://, azblob://, file://)")
	fs.StringVar(&loc.Prefix, "prefix", "", "key prefix of the Session's storage")
	fs.StringVar(&loc.Namespace, "namespace", "", "the Session's namespace")
	fs.StringVar(&loc.Session, "session", "", "the Session's name")
	fs.StringVar(&loc.UID, "uid", "", "the Session's UID")
	fs.StringVar(&target.Kind, "target-kind", "", "replay target adapter kind; empty: the log's session/start")
	fs.StringVar(&target.API, "target-api", "", "replay target api")
	fs.StringVar(&target.Provider, "target-provider", "", "replay target provider")
	fs.StringVar(&target.Model, "target-model", "", "replay target model")
	termPath := fs.String("termination-message-path", "", "file to leave the summary or the failure in, for the pod's status")
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	task, err := ParseTask(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "turnlog worker: %v\n", err)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || *storeURL == "" || loc.Namespace == "" || loc.Session == "" || loc.UID == "" {
		fmt.Fprintln(stderr, "turnlog worker: --store-url, --namespace, --session and --uid are required, and nothing else")
		return 2
	}

	sum, err := runStored(ctx, task, *storeURL, loc, target)
	if err != nil {
		msg := fmt.Sprintf("%s %s: %v", task, loc, err)
		fmt.Fprintf(stderr, "turnlog worker: %s\n", strings.ReplaceAll(msg, "\n", " "))
		writeTermination(*termPath, []byte(msg), stderr)
		return 1
	}
	data, _ := json.Marshal(sum) // a Summary always encodes
	fmt.Fprintln(stdout, string(data))
	writeTermination(*termPath, data, stderr)
	return 0
}

func runStored(ctx context.Context, task Task, url string, loc sessionlog.Location, target turnlog.Adapter) (Summary, error) {
	b, err := store.Open(ctx, url, nil)
	if err != nil {
		return Summary{}, err
	}
	defer b.Close()
	log, err := sessionlog.New(b).Log(loc)
	if err != nil {
		return Summary{}, err
	}
	return Run(ctx, task, StoreLog{Log: log}, target)
}

// writeTermination leaves msg where the kubelet reads the termination
// message; failing to is reported but does not fail the run, whose results
// are in the store.
func writeTermination(path string, msg []byte, stderr io.Writer) {
	if path == "" {
		return
	}
	if len(msg) > maxTerminationMessage {
		msg = []byte(truncate(string(msg), maxTerminationMessage))
	}
	if err := os.WriteFile(path, msg, 0o644); err != nil {
		fmt.Fprintf(stderr, "turnlog worker: writing the termination message: %v\n", err)
	}
}
