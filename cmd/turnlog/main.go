// Command turnlog runs every part of turnlog from one binary: the offline
// tools for debugging a session log on a laptop (assemble, replay,
// fork-point, cut, validate), which run the same code as the worker pods,
// and the cluster components.
//
// Each command lives in its own file and registers itself in init, so adding
// one never touches this file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// runFunc runs one command. It returns the process exit code: 0 success,
// 1 failure (bad input, I/O), 2 usage error.
type runFunc func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int

type command struct {
	summary string
	run     runFunc
}

// commands is the dispatch table, filled by register.
var commands = map[string]command{}

func register(name, summary string, run runFunc) {
	if _, taken := commands[name]; taken {
		panic("turnlog: command registered twice: " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		// A second signal kills the process the default way.
		signal.Stop(signals)
		cancel(&interrupted{sig.(syscall.Signal)})
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	os.Exit(code)
}

// interrupted is the cause of a context cancelled by SIGINT or SIGTERM.
type interrupted struct{ sig syscall.Signal }

func (i *interrupted) Error() string {
	if i.sig == syscall.SIGINT {
		return "interrupted (SIGINT)"
	}
	return "terminated (SIGTERM)"
}

// exitCode is the shell's code for a process ended by the signal.
func (i *interrupted) exitCode() int { return 128 + int(i.sig) }

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printCommands(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if cmd, ok := commands[args[1]]; ok {
				return cmd.run(ctx, []string{"-h"}, stdin, stdout, stdout)
			}
			fmt.Fprintf(stderr, "turnlog: unknown command %q (run \"turnlog help\" for the list)\n", args[1])
			return 2
		}
		printCommands(stdout)
		return 0
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "turnlog: unknown command %q (run \"turnlog help\" for the list)\n", name)
		return 2
	}
	return cmd.run(ctx, args[1:], stdin, stdout, stderr)
}

func printCommands(w io.Writer) {
	fmt.Fprintln(w, "usage: turnlog COMMAND [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range commands {
			if !yield(name) {
				return
			}
		}
	})
	for _, name := range names {
		fmt.Fprintf(w, "  %-12s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun \"turnlog help COMMAND\" for a command's flags.")
}

// newFlagSet returns a flag set whose usage names the command's arguments.
func newFlagSet(name, argsUsage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: turnlog %s [flags] %s\n", name, argsUsage)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses flags wherever they appear among the arguments, so
// `turnlog replay log.jsonl --through 9` works like the flags-first form. It
// returns the positional arguments, or an exit code when parsing ends the
// command (0 after -h, 2 for a usage error, already reported).
func parseArgs(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return nil, 0, false
			}
			return nil, 2, false
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, 0, true
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// isFlagSet reports whether the flag was given on the command line.
func isFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// oneLogArg checks for the single FILE|- argument of the log commands.
func oneLogArg(fs *flag.FlagSet, args []string) (string, int, bool) {
	positional, code, ok := parseArgs(fs, args)
	if !ok {
		return "", code, false
	}
	if len(positional) != 1 {
		fmt.Fprintf(fs.Output(), "turnlog %s: want one log FILE, or - for standard input; got %d arguments\n", fs.Name(), len(positional))
		fs.Usage()
		return "", 2, false
	}
	return positional[0], 0, true
}

// noArgs parses a command that takes flags only.
func noArgs(fs *flag.FlagSet, args []string) (int, bool) {
	positional, code, ok := parseArgs(fs, args)
	if !ok {
		return code, false
	}
	if len(positional) > 0 {
		fs.Usage()
		return 2, false
	}
	return 0, true
}

// openLog opens a log argument: a file name, or - for stdin.
func openLog(name string, stdin io.Reader) (io.ReadCloser, error) {
	if name == "-" {
		return io.NopCloser(stdin), nil
	}
	return os.Open(name)
}

// logName is how error messages name a log argument.
func logName(name string) string {
	if name == "-" {
		return "stdin"
	}
	return name
}

// fail reports an error on one line and returns exit code 1, or, if a
// signal ended the command, says so and returns 130 (SIGINT) or 143
// (SIGTERM) as a shell does.
func fail(stderr io.Writer, cmd string, err error) int {
	if i, ok := errors.AsType[*interrupted](err); ok {
		fmt.Fprintf(stderr, "turnlog %s: %v\n", cmd, i)
		return i.exitCode()
	}
	fmt.Fprintf(stderr, "turnlog %s: %s\n", cmd, strings.ReplaceAll(err.Error(), "\n", " "))
	return 1
}

// usageError reports a bad flag value or a missing flag, and the command's
// usage, and returns exit code 2: every command exits 2 for a command line
// it cannot run, 1 for input or work that fails.
func usageError(fs *flag.FlagSet, err error) int {
	fmt.Fprintf(fs.Output(), "turnlog %s: %s\n", fs.Name(), strings.ReplaceAll(err.Error(), "\n", " "))
	fs.Usage()
	return 2
}

// interruptible reads r in a goroutine, so that a read blocked on a
// terminal or a pipe ends as soon as ctx does, with ctx's cause. The
// goroutine reads at most one buffer ahead.
func interruptible(ctx context.Context, r io.Reader) io.Reader {
	chunks := make(chan readChunk)
	go func() {
		for {
			buf := make([]byte, 64<<10)
			n, err := r.Read(buf)
			select {
			case chunks <- readChunk{buf[:n], err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return &ctxReader{ctx: ctx, chunks: chunks}
}

type readChunk struct {
	data []byte
	err  error
}

type ctxReader struct {
	ctx    context.Context
	chunks chan readChunk
	rest   []byte
	err    error // what ended the input, once the reader has seen it
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, context.Cause(c.ctx)
	}
	if len(c.rest) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		select {
		case <-c.ctx.Done():
			return 0, context.Cause(c.ctx)
		case chunk := <-c.chunks:
			c.rest, c.err = chunk.data, chunk.err
		}
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	if len(c.rest) == 0 && c.err != nil {
		return n, c.err
	}
	return n, nil
}

// addTargetFlags adds the flags that name a replay target; fields left
// unset default to what defaults names.
func addTargetFlags(fs *flag.FlagSet, target *turnlog.Adapter, defaults string) {
	fs.StringVar(&target.Kind, "kind", "", "target adapter kind (default: "+defaults+")")
	fs.StringVar(&target.API, "api", "", "target api (default: "+defaults+")")
	fs.StringVar(&target.Provider, "provider", "", "target provider (default: "+defaults+")")
	fs.StringVar(&target.Model, "model", "", "target model (default: "+defaults+")")
	fs.Func("release-line", `pi-ai release line whose replay rules to follow: "1" or "0.73" (default: `+defaults+`, else "1")`, func(s string) error {
		if err := turnlog.CheckReleaseLine(s); err != nil {
			return err
		}
		target.ReleaseLine = s
		return nil
	})
	fs.Func("refused-blocks", `what to do with thinking blocks the provider refused: "Keep" (as pi does) or "Drop" (leave them out) (default: `+defaults+`, else "Keep")`, func(s string) error {
		if err := turnlog.CheckRefusedBlocks(s); err != nil {
			return err
		}
		target.RefusedBlocks = s
		return nil
	})
}
