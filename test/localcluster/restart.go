package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
)

// apiserverProcess is a kube-apiserver this package started again after
// RestartAPIServer killed envtest's.
type apiserverProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
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
	pid, argv, env, dir, err := c.findAPIServer()
	if err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("restart kube-apiserver: kill pid %d: %w", pid, err)
	}
	if c.apiserver != nil {
		<-c.apiserver.done
		c.apiserver = nil
	} else if err := waitGone(ctx, pid); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, dir
	cmd.Stdout, cmd.Stderr = c.apiserverLog, c.apiserverLog
	// Gone with the process that runs the cluster, as envtest's was.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	p := &apiserverProcess{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.apiserver = p
	return c.waitReady(ctx, p)
}

// findAPIServer finds the running kube-apiserver of this cluster: the one
// this package restarted, or envtest's, by its etcd.
func (c *Cluster) findAPIServer() (pid int, argv, env []string, dir string, err error) {
	if c.apiserver != nil {
		cmd := c.apiserver.cmd
		return cmd.Process.Pid, cmd.Args, cmd.Env, cmd.Dir, nil
	}
	etcd := "--etcd-servers=" + c.env.ControlPlane.Etcd.URL.String()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil, nil, "", err
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
		if filepath.Base(argv[0]) != "kube-apiserver" || !contains(argv, etcd) {
			continue
		}
		environ, err := os.ReadFile(filepath.Join(proc, "environ"))
		if err != nil {
			return 0, nil, nil, "", err
		}
		dir, err := os.Readlink(filepath.Join(proc, "cwd"))
		if err != nil {
			return 0, nil, nil, "", err
		}
		var env []string
		for _, kv := range bytes.Split(bytes.TrimSuffix(environ, []byte{0}), []byte{0}) {
			env = append(env, string(kv))
		}
		return pid, argv, env, dir, nil
	}
	return 0, nil, nil, "", fmt.Errorf("no kube-apiserver process with %s", etcd)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
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
func (c *Cluster) waitReady(ctx context.Context, p *apiserverProcess) error {
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

// stopRestartedAPIServer stops a kube-apiserver RestartAPIServer started.
func (c *Cluster) stopRestartedAPIServer() {
	p := c.apiserver
	if p == nil {
		return
	}
	c.apiserver = nil
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
