package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/turnlog/turnlog/internal/derived"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/telemetry"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// maxSummaryMessage bounds the summary a pod reports as a run's result:
// the manager keeps only a line of it.
const maxSummaryMessage = 4096

// Invocation is one worker run as its command line carries it: everything
// a worker is told. A worker pod is handed Args for each run, and the
// manager's in-process runs parse the same arguments (Execute), so
// whatever reaches a local run has been through the command line a pod
// is handed. A field added here and not bound in flags fails
// TestInvocationRoundTrip.
type Invocation struct {
	Task derived.Task
	// StoreURL opens the object store holding the log.
	StoreURL string
	Location sessionlog.Location
	// Target is the adapter replay replays for, its release line included;
	// empty fields are the log's session/start adapter's.
	Target turnlog.Adapter
	// SentKeptThrough is a fork child's cut (spec.forkedFrom.cutSeq): the
	// responses through it were requested by the source's host.
	SentKeptThrough int64
	// ForkCut is a fork child's cut (spec.forkedFrom.cutSeq): the turns
	// through it are its sources', and so are their spans. ForkSource is
	// the UID of the Session whose trace holds the turn the cut ends (its
	// source's, or the source's own source's for a cut in the turns the
	// source copied); empty for a Session that is no fork's.
	ForkSource string
	ForkCut    int64
	// Trace is where the run was asked for: the W3C trace context of the
	// manager's span that submitted it, whose child the run's span is. It
	// says nothing of what the run does, so Digest leaves it out.
	Trace TraceContext
}

// TraceContext is a W3C trace context: the traceparent and tracestate
// headers' values, empty for none.
type TraceContext struct {
	Parent, State string
}

// flags binds every flag of the worker command line to a field of inv:
// the one definition both Args and ParseArgs read.
func (inv *Invocation) flags(fs *flag.FlagSet) {
	fs.StringVar(&inv.StoreURL, "store-url", "", "object store holding the log (s3://, gs://, azblob://, file://)")
	fs.StringVar(&inv.Location.Prefix, "prefix", "", "key prefix of the Session's storage")
	fs.StringVar(&inv.Location.Namespace, "namespace", "", "the Session's namespace")
	fs.StringVar(&inv.Location.Session, "session", "", "the Session's name")
	fs.StringVar(&inv.Location.UID, "uid", "", "the Session's UID")
	fs.StringVar(&inv.Target.Kind, "target-kind", "", "replay target adapter kind; empty: the log's session/start")
	fs.StringVar(&inv.Target.API, "target-api", "", "replay target api")
	fs.StringVar(&inv.Target.Provider, "target-provider", "", "replay target provider")
	fs.StringVar(&inv.Target.Model, "target-model", "", "replay target model")
	fs.StringVar(&inv.Target.ReleaseLine, "target-release-line", "", `pi-ai release line whose rules replay follows: "1" or "0.73"; empty: the log's, else "1"`)
	fs.StringVar(&inv.Target.RefusedBlocks, "target-refused-blocks", "", `what replay does with thinking blocks the provider refused: "Keep" (as pi does; empty) or "Drop"`)
	fs.Int64Var(&inv.SentKeptThrough, "sent-kept-through", 0, "a fork's cut: the responses through this seq were requested by the source's host, with every block kept")
	fs.StringVar(&inv.ForkSource, "fork-source-uid", "", "a fork's child: the UID of the Session whose trace holds the turn it was cut at")
	fs.Int64Var(&inv.ForkCut, "fork-cut-seq", 0, "a fork's child: the seq of the turn/end its log was cut at")
	fs.StringVar(&inv.Trace.Parent, flagTraceParent, "", "W3C traceparent of the span that asked for the run, its span's parent; empty or malformed: the run's span is a root")
	fs.StringVar(&inv.Trace.State, flagTraceState, "", "W3C tracestate going with --traceparent")
}

// The flags of Invocation.Trace, which Digest leaves out.
const (
	flagTraceParent = "traceparent"
	flagTraceState  = "tracestate"
)

// Args is the invocation's command line after the binary's name:
// `worker TASK --flag=value ...`, every flag written, so that parsing it
// gives back exactly inv.
func (inv Invocation) Args() []string { return inv.commandLine(true) }

// commandLine is Args, without the trace context's flags unless withTrace.
func (inv Invocation) commandLine(withTrace bool) []string {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	// Binding sets each field to its default; the values are put in after.
	var bound Invocation
	bound.flags(fs)
	bound = inv
	args := []string{"worker", string(inv.Task)}
	fs.VisitAll(func(f *flag.Flag) {
		if withTrace || (f.Name != flagTraceParent && f.Name != flagTraceState) {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return args
}

// Digest identifies the run the invocation asks for by its command line,
// the trace context left out: equal digests, the same arguments but for
// where the run was asked from. A run submitted again from another
// reconcile is the same run (its name, its failures and the span
// attribute turnlog.worker.invocation are of the digest), and a digest
// is what it was before the command line carried trace contexts.
func (inv Invocation) Digest() string {
	sum := sha256.Sum256([]byte(strings.Join(inv.commandLine(false), "\x00")))
	return hex.EncodeToString(sum[:])
}

// errUsage is a command line ParseArgs refused; its message is already
// written.
var errUsage = errors.New("usage")

// ParseArgs parses a worker command line after `worker`: TASK and flags.
// Problems are written to stderr, one line each.
func ParseArgs(args []string, stderr io.Writer) (Invocation, error) {
	var inv Invocation
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: turnlog worker assemble|replay --store-url URL --namespace NS --session NAME --uid UID [flags]")
		fs.PrintDefaults()
	}
	inv.flags(fs)
	if len(args) == 0 {
		fs.Usage()
		return inv, errUsage
	}
	task, err := derived.ParseTask(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "turnlog worker: %v\n", err)
		return inv, errUsage
	}
	inv.Task = task
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return inv, flag.ErrHelp
		}
		return inv, errUsage
	}
	switch {
	case fs.NArg() > 0 || inv.StoreURL == "" || inv.Location.Namespace == "" || inv.Location.Session == "" || inv.Location.UID == "":
		fmt.Fprintln(stderr, "turnlog worker: --store-url, --namespace, --session and --uid are required, and nothing else")
		return inv, errUsage
	case turnlog.CheckReleaseLine(inv.Target.ReleaseLine) != nil:
		fmt.Fprintf(stderr, "turnlog worker: --target-release-line: %v\n", turnlog.CheckReleaseLine(inv.Target.ReleaseLine))
		return inv, errUsage
	case turnlog.CheckRefusedBlocks(inv.Target.RefusedBlocks) != nil:
		fmt.Fprintf(stderr, "turnlog worker: --target-refused-blocks: %v\n", turnlog.CheckRefusedBlocks(inv.Target.RefusedBlocks))
		return inv, errUsage
	case inv.SentKeptThrough < 0:
		fmt.Fprintf(stderr, "turnlog worker: --sent-kept-through: %d is not a seq\n", inv.SentKeptThrough)
		return inv, errUsage
	case inv.ForkCut < 0:
		fmt.Fprintf(stderr, "turnlog worker: --fork-cut-seq: %d is not a seq\n", inv.ForkCut)
		return inv, errUsage
	}
	return inv, nil
}

// Opener opens the log an invocation names; closing releases what opening
// took.
type Opener func(ctx context.Context, storeURL string, loc sessionlog.Location) (log derived.Log, closeLog func() error, err error)

// OpenStore opens the store by URL with the process's own credentials, as
// a worker pod does.
func OpenStore(ctx context.Context, url string, loc sessionlog.Location) (derived.Log, func() error, error) {
	b, err := store.Open(ctx, url, nil)
	if err != nil {
		return nil, nil, err
	}
	log, err := sessionlog.New(b).Log(loc)
	if err != nil {
		_ = b.Close()
		return nil, nil, err
	}
	return derived.StoreLog{Log: log}, b.Close, nil
}

// Execute runs the invocation a command line names (see Invocation) on the
// log open gives for it.
func Execute(ctx context.Context, inv Invocation, open Opener) (sum derived.Summary, err error) {
	ctx, end := startRun(ctx, inv)
	defer func() { end(err) }()
	log, closeLog, err := open(ctx, inv.StoreURL, inv.Location)
	if err != nil {
		return derived.Summary{}, err
	}
	defer func() { _ = closeLog() }()
	switch inv.Task {
	case derived.TaskReplay:
		return ReplayWith(ctx, log, inv.Target, ReplayOptions{SentKeptThrough: inv.SentKeptThrough})
	case derived.TaskAssemble:
		return AssembleWith(ctx, log, AssembleOptions{Session: sessionOf(inv)})
	}
	return Run(ctx, inv.Task, log, inv.Target)
}

// Command is `turnlog worker assemble|replay [flags]`: it runs the task
// over the Session's log, as a worker pod runs a run it is handed, and
// prints the Summary as JSON. `turnlog worker serve` is a worker pod's
// entrypoint (Serve). It returns the process exit code: 0 success, 1
// failure, 2 usage.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "serve" {
		return Serve(ctx, args[1:], stderr)
	}
	inv, err := ParseArgs(args, stderr)
	if err == flag.ErrHelp {
		return 0
	} else if err != nil {
		return 2
	}
	// A run on its own exports traces by the OTEL_EXPORTER_OTLP_* variables.
	tel, err := telemetry.Start(ctx, telemetry.Flags{}, "turnlog-worker")
	if err != nil {
		fmt.Fprintf(stderr, "turnlog worker: exporting no traces: %v\n", err)
	}
	defer func() { _ = tel.Shutdown(ctx) }()
	sum, err := Execute(ctx, inv, OpenStore)
	if err != nil {
		msg := fmt.Sprintf("%s %s: %v", inv.Task, inv.Location, err)
		fmt.Fprintf(stderr, "turnlog worker: %s\n", strings.ReplaceAll(msg, "\n", " "))
		return 1
	}
	data, _ := json.Marshal(sum) // a derived.Summary always encodes
	fmt.Fprintln(stdout, string(data))
	return 0
}

// summaryMessage is the summary as a run's result carries it: whole when
// it fits, else without the lists of refused blocks' seqs, which a badly
// refused log fills past maxSummaryMessage. A Session's status reads them
// from the checkpoint, not from the message.
func summaryMessage(sum derived.Summary) []byte {
	data, _ := json.Marshal(sum)
	if len(data) <= maxSummaryMessage || sum.Replay == nil {
		return data
	}
	c := *sum.Replay
	c.RefusedSeqs = nil
	sum.Replay = &c
	data, _ = json.Marshal(sum)
	return data
}
