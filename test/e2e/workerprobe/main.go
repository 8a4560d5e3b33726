// Command workerprobe is the entrypoint of the e2e suite's probe images on
// the container node. It reports, on stderr (so in `kubectl logs`), what a
// real runtime enforces on a worker container: its user, capabilities,
// no_new_privs and seccomp mode, whether a service-account token is
// mounted, and whether the root filesystem is writable. Then it waits a
// few seconds, so that a spec can act while the pod is Running, and
// replaces itself with /turnlog, so the container's process is the worker.
//
// Two other modes are a worker pod's command line (`worker serve
// --endpoint=... --namespace=...`, as the manager's Deployment gives it)
// after a first flag:
//
//   - --oom: a worker that runs out of memory during a run. It takes one
//     run from the manager, as `turnlog worker serve` does, and allocates
//     memory until the kernel kills it; restarted, it takes the next. The
//     run's lease is lost with it, and the manager reads OOMKilled from the
//     pod's status.
//   - --slow-runs: a worker whose runs take a while. It takes runs as
//     `turnlog worker serve` does, renewing their leases, and does each
//     with `/turnlog worker ...` after holding it for slowRunHold, so that
//     a spec can act while a pod holds a run. Unlike `turnlog worker
//     serve` it does not finish what it holds when stopped: SIGTERM ends
//     it at once, as SIGKILL would, so a pod deleted while it holds a run
//     loses the run's lease whatever its grace period.
//
// The turnlog binary it runs is /turnlog, or $WORKERPROBE_TURNLOG (the
// process node, where images are local files).
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/turnlog/turnlog/internal/workerpool"
)

const tokenPath = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// slowRunHold is how long --slow-runs holds each run before doing it.
const slowRunHold = 15 * time.Second

// The environment a worker pod gets from the manager's Deployment (as
// internal/worker names it).
const (
	envToken = "TURNLOG_WORKER_TOKEN"
	envCA    = "TURNLOG_WORKER_CA"
	envPod   = "POD_NAME"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "--oom":
			oom(os.Args[2:])
		case "--slow-runs":
			os.Exit(slowRuns(os.Args[2:]))
		}
	}
	report()
	time.Sleep(5 * time.Second)
	bin := turnlogBinary()
	err := syscall.Exec(bin, append([]string{bin}, os.Args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "workerprobe: exec", bin+":", err)
	os.Exit(127)
}

func turnlogBinary() string {
	if bin := os.Getenv("WORKERPROBE_TURNLOG"); bin != "" {
		return bin
	}
	return "/turnlog"
}

func report() {
	fmt.Fprintf(os.Stderr, "workerprobe: uid=%d gid=%d\n", os.Getuid(), os.Getgid())
	if f, err := os.Open("/proc/self/status"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			key, value, _ := strings.Cut(s.Text(), ":")
			switch key {
			case "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp":
				fmt.Fprintf(os.Stderr, "workerprobe: %s=%s\n", key, strings.TrimSpace(value))
			}
		}
		f.Close()
	}
	if _, err := os.Stat(tokenPath); err == nil {
		fmt.Fprintln(os.Stderr, "workerprobe: service-account token present")
	} else {
		fmt.Fprintln(os.Stderr, "workerprobe: service-account token absent")
	}
	if err := os.WriteFile("/workerprobe-write", []byte("x"), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "workerprobe: write /: %v\n", err)
	} else {
		fmt.Fprintln(os.Stderr, "workerprobe: write /: ok")
	}
}

// serveArgs are what a pod's `worker serve ...` command line says.
type serveArgs struct {
	endpoint, namespace string
	runs                int
}

// parseServe parses `worker serve --endpoint=... --namespace=... [--runs=N]`.
func parseServe(args []string) (serveArgs, error) {
	if len(args) < 2 || args[0] != "worker" || args[1] != "serve" {
		return serveArgs{}, fmt.Errorf("want a worker pod's command line, worker serve ..., not %q", args)
	}
	var s serveArgs
	fs := flag.NewFlagSet("worker serve", flag.ContinueOnError)
	fs.StringVar(&s.endpoint, "endpoint", "", "")
	fs.StringVar(&s.namespace, "namespace", "", "")
	fs.IntVar(&s.runs, "runs", 1, "")
	if err := fs.Parse(args[2:]); err != nil {
		return s, err
	}
	if s.endpoint == "" || s.namespace == "" {
		return s, fmt.Errorf("--endpoint and --namespace are required: %q", args)
	}
	return s, nil
}

// client is the pod's client of the manager's worker endpoint, from its
// command line and environment.
func client(s serveArgs) (*workerpool.Client, error) {
	token, ca, pod := os.Getenv(envToken), os.Getenv(envCA), os.Getenv(envPod)
	if token == "" || ca == "" {
		return nil, fmt.Errorf("%s and %s must be set", envToken, envCA)
	}
	if pod == "" {
		pod, _ = os.Hostname()
	}
	return workerpool.NewClient(s.endpoint, s.namespace, pod, token, []byte(ca))
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "workerprobe: "+format+"\n", args...)
	os.Exit(2)
}

// oom takes one run and allocates memory until killed.
func oom(args []string) {
	s, err := parseServe(args)
	if err != nil {
		fatal("--oom: %v", err)
	}
	c, err := client(s)
	if err != nil {
		fatal("--oom: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Fprintf(os.Stderr, "workerprobe: --oom: taking a run of namespace %s from %s\n", s.namespace, s.endpoint)
	for ctx.Err() == nil {
		lease, ok, err := c.Lease(ctx, 30*time.Second)
		switch {
		case errors.Is(err, workerpool.ErrUnauthorized):
			fatal("--oom: %v", err)
		case err != nil:
			fmt.Fprintf(os.Stderr, "workerprobe: --oom: asking for a run: %v\n", err)
			time.Sleep(time.Second)
			continue
		case !ok:
			continue
		}
		fmt.Fprintf(os.Stderr, "workerprobe: --oom: leased run %s (%s)\n", lease.Name, strings.Join(lease.Args[:min(2, len(lease.Args))], " "))
		hog()
	}
	os.Exit(0)
}

// hog touches memory a MiB at a time, keeping all of it, up to 4 GiB.
func hog() {
	fmt.Fprintln(os.Stderr, "workerprobe: allocating memory until killed")
	var kept [][]byte
	for i := 0; i < 4096; i++ {
		b := make([]byte, 1<<20)
		for j := range b {
			b[j] = byte(j)
		}
		kept = append(kept, b)
	}
	fmt.Fprintf(os.Stderr, "workerprobe: %d MiB allocated and not killed\n", len(kept))
	os.Exit(1)
}

// slowRuns serves runs as `turnlog worker serve` does, holding each for
// slowRunHold first. It returns the exit code.
func slowRuns(args []string) int {
	s, err := parseServe(args)
	if err != nil {
		fatal("--slow-runs: %v", err)
	}
	c, err := client(s)
	if err != nil {
		fatal("--slow-runs: %v", err)
	}
	// No handler for SIGTERM: it ends the process, and the run it holds.
	ctx := context.Background()
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s workerprobe: --slow-runs: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, a...))
	}
	bin := turnlogBinary()
	logf("taking namespace %s's runs from %s, each held %s, then done by %s", s.namespace, s.endpoint, slowRunHold, bin)
	err = workerpool.Serve(ctx, c, workerpool.ServeOptions{
		Runs: s.runs, Logf: logf,
		Execute: func(ctx context.Context, run []string) (string, error) {
			logf("holding %s for %s", strings.Join(run[:min(2, len(run))], " "), slowRunHold)
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(slowRunHold):
			}
			// The worker prints its summary on stdout, as the result's
			// message; why it failed on stderr.
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, bin, run...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				return "", fmt.Errorf("%s %s: %v: %s", bin, strings.Join(run[:min(2, len(run))], " "), err, strings.TrimSpace(stderr.String()))
			}
			return strings.TrimSpace(stdout.String()), nil
		},
	})
	if err != nil {
		logf("%v", err)
		return 1
	}
	return 0
}
