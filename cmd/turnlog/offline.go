package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/forkcut"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// The offline commands: the worker's assembly, replay and fork cut, run on a
// log file so a session can be debugged without a cluster.
func init() {
	register("assemble", "assemble each response into a pi-ai assistant message (JSON)", runAssemble)
	register("replay", "build the model transcript through a seq for a target adapter (JSON)", runReplay)
	register("fork-point", "find where a fork at --at cuts the log (JSON)", runForkPoint)
	register("cut", "write the log a fork at --at would start with (JSON Lines)", runCut)
	register("validate", "report every structural problem of a log, by line", runValidate)
}

// withLog opens the log argument and calls f with its events, their
// structure checked. Errors name the log. Reading stops with ctx's cause
// when ctx ends (on SIGINT or SIGTERM), even while waiting for input.
func withLog(ctx context.Context, name string, stdin io.Reader, f func(log turnlog.Events) error) error {
	in, err := openLog(name, stdin)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := f(turnlog.NewReader(interruptible(ctx, in)).All()); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
		return fmt.Errorf("%s: %w", logName(name), err)
	}
	return nil
}

func runAssemble(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("assemble", "FILE|-", stderr)
	name, code, ok := oneLogArg(fs, args)
	if !ok {
		return code
	}
	var res assembler.Result
	err := withLog(ctx, name, stdin, func(log turnlog.Events) (err error) {
		res, err = assembler.Assemble(log)
		return err
	})
	if err == nil {
		err = cmdkit.WriteJSON(stdout, res)
	}
	if err != nil {
		return fail(stderr, fs.Name(), err)
	}
	return 0
}

func runReplay(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("replay", "FILE|-", stderr)
	through := fs.Int64("through", -1, "last seq to replay; negative for the whole log")
	var target turnlog.Adapter
	addTargetFlags(fs, &target, "the session/start adapter's")
	name, code, ok := oneLogArg(fs, args)
	if !ok {
		return code
	}
	// The same type the workers store, so `turnlog transcript` prints
	// the same bytes.
	out := derived.Transcript{Diagnostics: []replay.Diagnostic{}}
	opts := replay.Options{
		Target:       target,
		Through:      *through,
		OnDiagnostic: func(d replay.Diagnostic) { out.Diagnostics = append(out.Diagnostics, d) },
	}
	if opts.Through < 0 {
		opts.Through = replay.Head
	}
	// A context event may need messages the context no longer holds, which
	// replay reads from the log again: stdin is kept in a file for that.
	path, cleanup, err := rereadable(ctx, name, stdin)
	defer cleanup()
	if err != nil {
		return fail(stderr, fs.Name(), fmt.Errorf("%s: %w", logName(name), err))
	}
	opts.Reread = func(int64) turnlog.Events { return fileEvents(path) }
	in := stdin
	if name == "-" {
		f, err := os.Open(path)
		if err != nil {
			return fail(stderr, fs.Name(), err)
		}
		defer f.Close()
		in = f
	}
	err = withLog(ctx, name, in, func(log turnlog.Events) (err error) {
		out.Result, err = replay.Transcript(log, opts)
		return err
	})
	if err == nil {
		err = cmdkit.WriteJSON(stdout, out)
	}
	if err != nil {
		return fail(stderr, fs.Name(), err)
	}
	return 0 // a degraded message is a diagnostic, not a failure
}

// forkFlags parses the arguments shared by fork-point and cut.
func forkFlags(name string, args []string, stderr io.Writer) (atSeq, log string, code int, ok bool) {
	fs := newFlagSet(name, "--at SEQ FILE|-", stderr)
	at := fs.String("at", "", `fork position: a non-negative decimal seq such as "41" or "41.1"`)
	log, code, ok = oneLogArg(fs, args)
	if !ok {
		return "", "", code, false
	}
	if !isFlagSet(fs, "at") {
		fmt.Fprintf(stderr, "turnlog %s: --at is required\n", name)
		fs.Usage()
		return "", "", 2, false
	}
	if _, err := forkcut.ParseAtSeq(*at); err != nil {
		return "", "", usageError(fs, fmt.Errorf("--at: %w", err)), false
	}
	return *at, log, 0, true
}

func runForkPoint(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	atSeq, name, code, ok := forkFlags("fork-point", args, stderr)
	if !ok {
		return code
	}
	var p forkcut.Point
	err := withLog(ctx, name, stdin, func(log turnlog.Events) (err error) {
		p, err = forkcut.Find(log, atSeq)
		return err
	})
	if err == nil {
		err = cmdkit.WriteJSON(stdout, p)
	}
	if err != nil {
		return fail(stderr, "fork-point", err)
	}
	return 0
}

func runCut(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	atSeq, name, code, ok := forkFlags("cut", args, stderr)
	if !ok {
		return code
	}
	// The cut is found before anything is written, so a fork that cannot cut
	// leaves no partial child behind; standard input is spooled to read it twice.
	if name == "-" {
		spool, err := spoolStdin(interruptible(ctx, stdin))
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				err = cause
			}
			return fail(stderr, "cut", fmt.Errorf("stdin: %w", err))
		}
		defer os.Remove(spool)
		name = spool
	}
	var p forkcut.Point
	err := withLog(ctx, name, nil, func(log turnlog.Events) (err error) {
		p, err = forkcut.Find(log, atSeq)
		return err
	})
	if err == nil {
		out := bufio.NewWriter(stdout)
		err = withLog(ctx, name, nil, func(log turnlog.Events) error {
			return forkcut.WriteChild(log, turnlog.NewWriter(out), p)
		})
		if err == nil {
			err = out.Flush()
		}
	}
	if err != nil {
		return fail(stderr, "cut", err)
	}
	return 0
}

func spoolStdin(stdin io.Reader) (string, error) {
	f, err := os.CreateTemp("", "turnlog-cut-*.jsonl")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(f, stdin)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

func runValidate(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", "FILE|-", stderr)
	name, code, ok := oneLogArg(fs, args)
	if !ok {
		return code
	}
	problems, events := 0, 0
	err := withLog(ctx, name, stdin, func(log turnlog.Events) error {
		for _, err := range log {
			if _, ok := errors.AsType[*turnlog.LineError](err); ok {
				problems++
				fmt.Fprintf(stdout, "%s: %v\n", logName(name), err)
				continue // reading goes on at the next line
			}
			if err != nil {
				return err
			}
			events++
		}
		return nil
	})
	if err != nil {
		return fail(stderr, fs.Name(), err)
	}
	if problems > 0 {
		fmt.Fprintf(stderr, "turnlog validate: %s: %d problem(s)\n", logName(name), problems)
		return 1
	}
	fmt.Fprintf(stdout, "%s: valid, %d events\n", logName(name), events)
	return 0
}

// fileEvents reads the log in the file at path again, opening it for the
// iteration and closing it after.
func fileEvents(path string) turnlog.Events {
	return func(yield func(turnlog.Event, error) bool) {
		f, err := os.Open(path)
		if err != nil {
			yield(turnlog.Event{}, err)
			return
		}
		defer f.Close()
		for e, err := range turnlog.NewReader(f).All() {
			if !yield(e, err) {
				return
			}
		}
	}
}

// rereadable returns a file holding the log argument name: the file itself,
// or for - a temporary copy of stdin, which cleanup removes.
func rereadable(ctx context.Context, name string, stdin io.Reader) (path string, cleanup func(), err error) {
	if name != "-" {
		return name, func() {}, nil
	}
	f, err := os.CreateTemp("", "turnlog-stdin-*.jsonl")
	if err != nil {
		return "", func() {}, err
	}
	cleanup = func() { os.Remove(f.Name()) }
	_, err = io.Copy(f, interruptible(ctx, stdin))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if cause := context.Cause(ctx); cause != nil {
		err = cause
	}
	return f.Name(), cleanup, err
}
