package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
)

// restartedProcess is a control-plane process (kube-apiserver, etcd) this
// package started again after killing envtest's.
type restartedProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// processCommand is how a running process was started, to start it again.
type processCommand struct {
	pid       int
	argv, env []string
	dir       string
}

// start starts the command again with output to out. It is gone with the
// process that runs the cluster, as envtest's was.
func (p processCommand) start(out *os.File) (*restartedProcess, error) {
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env, cmd.Dir = p.env, p.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &restartedProcess{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	return r, nil
}

// kill SIGKILLs the process and waits until it is gone. restarted is this
// package's process of it, if it started it.
func (p processCommand) kill(ctx context.Context, restarted *restartedProcess) error {
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill pid %d: %w", p.pid, err)
	}
	if restarted != nil {
		<-restarted.done
		return nil
	}
	return waitGone(ctx, p.pid)
}

// RestartAPIServer SIGKILLs kube-apiserver, waits down, and starts it again
// with the same command line, certificates and etcd, as a control plane's
// API server restarts: clients keep their kubeconfigs and see connections
// refused, then watches that must be re-established. It returns once the
// new one answers /readyz.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) error {
	if c.env == nil {
		return errors.New("restart kube-apiserver: the cluster is not running")
	}
	apiserver, err := c.findAPIServer()
	if err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	if err := apiserver.kill(ctx, c.apiserver); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	c.apiserver = nil
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return c.startAPIServer(ctx, apiserver)
}

// startAPIServer starts kube-apiserver again as it was started, and waits
// until it answers /readyz.
func (c *Cluster) startAPIServer(ctx context.Context, apiserver processCommand) error {
	p, err := apiserver.start(c.apiserverLog)
	if err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	c.apiserver = p
	return c.waitReady(ctx, p)
}

// LoseControlPlane is a control plane lost with its etcd, and a new one in
// its place: kube-apiserver, etcd, kube-controller-manager, kube-scheduler
// and the kubelet are killed, etcd's data is deleted, and they start again
// on the same addresses and certificates (the kubeconfig stays valid) with
// nothing in the cluster but what Start installs: the CRDs and manifests.
// The kubelet registers the node anew and stops the containers of pods
// the new control plane does not know; images stay in containerd. Only
// on a container node.
func (c *Cluster) LoseControlPlane(ctx context.Context) error {
	if c.env == nil || c.cnode == nil {
		return errors.New("lose the control plane: the cluster is not running on a container node")
	}
	c.cnode.kubelet.stop()
	c.cnode.kubelet = nil
	for i := len(c.components) - 1; i >= 0; i-- {
		c.components[i].stop()
	}
	c.components = nil
	apiserver, err := c.findAPIServer()
	if err != nil {
		return fmt.Errorf("lose the control plane: %w", err)
	}
	if err := apiserver.kill(ctx, c.apiserver); err != nil {
		return fmt.Errorf("lose the control plane: kube-apiserver: %w", err)
	}
	c.apiserver = nil
	etcd, err := c.findEtcd()
	if err != nil {
		return fmt.Errorf("lose the control plane: %w", err)
	}
	if err := etcd.kill(ctx, c.etcd); err != nil {
		return fmt.Errorf("lose the control plane: etcd: %w", err)
	}
	c.etcd = nil
	dataDir := c.env.ControlPlane.Etcd.DataDir
	if err := os.RemoveAll(dataDir); err != nil {
		return fmt.Errorf("lose the control plane: deleting etcd's data: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("lose the control plane: %w", err)
	}
	if c.etcd, err = etcd.start(c.etcdLog); err != nil {
		return fmt.Errorf("lose the control plane: start etcd again: %w", err)
	}
	if err := c.startAPIServer(ctx, apiserver); err != nil {
		return fmt.Errorf("lose the control plane: %w", err)
	}
	if err := c.install(ctx); err != nil {
		return fmt.Errorf("lose the control plane: %w", err)
	}
	if err := c.startControllers(ctx, c.binDir); err != nil {
		return fmt.Errorf("lose the control plane: %w", err)
	}
	if err := c.startKubelet(ctx); err != nil {
		return fmt.Errorf("lose the control plane: %w", err)
	}
	return nil
}

// findAPIServer finds the running kube-apiserver of this cluster: the one
// this package restarted, or envtest's, by its etcd.
func (c *Cluster) findAPIServer() (processCommand, error) {
	if c.apiserver != nil {
		return commandOf(c.apiserver), nil
	}
	etcd := "--etcd-servers=" + c.env.ControlPlane.Etcd.URL.String()
	return findProcess("kube-apiserver", etcd)
}

// findEtcd finds the running etcd of this cluster: the one this package
// started again, or envtest's, by its data directory.
func (c *Cluster) findEtcd() (processCommand, error) {
	if c.etcd != nil {
		return commandOf(c.etcd), nil
	}
	return findProcess("etcd", "--data-dir="+c.env.ControlPlane.Etcd.DataDir)
}

func commandOf(p *restartedProcess) processCommand {
	return processCommand{pid: p.cmd.Process.Pid, argv: p.cmd.Args, env: p.cmd.Env, dir: p.cmd.Dir}
}

// findProcess finds the process whose binary is named binary and whose
// command line has the argument arg, with what started it.
func findProcess(binary, arg string) (processCommand, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return processCommand{}, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		proc := filepath.Join("/proc", e.Name())
		cmdline, err := os.ReadFile(filepath.Join(proc, "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
		if filepath.Base(argv[0]) != binary || !slices.Contains(argv, arg) {
			continue
		}
		environ, err := os.ReadFile(filepath.Join(proc, "environ"))
		if err != nil {
			return processCommand{}, err
		}
		dir, err := os.Readlink(filepath.Join(proc, "cwd"))
		if err != nil {
			return processCommand{}, err
		}
		var env []string
		for _, kv := range bytes.Split(bytes.TrimSuffix(environ, []byte{0}), []byte{0}) {
			env = append(env, string(kv))
		}
		return processCommand{pid: pid, argv: argv, env: env, dir: dir}, nil
	}
	return processCommand{}, fmt.Errorf("no %s process with %s", binary, arg)
}

// waitGone waits until process pid has exited and been reaped.
func waitGone(ctx context.Context, pid int) error {
	for {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pid %d did not go away: %w", pid, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitReady waits until the restarted kube-apiserver answers /readyz.
func (c *Cluster) waitReady(ctx context.Context, p *restartedProcess) error {
	clientset, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		body, err := clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("restart kube-apiserver: it exited (see %s)", c.apiserverLog.Name())
		case <-ctx.Done():
			return fmt.Errorf("restart kube-apiserver: not ready: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stopRestarted stops the kube-apiserver and etcd this package started
// again, the API server first.
func (c *Cluster) stopRestarted() {
	for _, p := range []*restartedProcess{c.apiserver, c.etcd} {
		if p == nil {
			continue
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	c.apiserver, c.etcd = nil, nil
}
