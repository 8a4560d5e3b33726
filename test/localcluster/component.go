package localcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// component is a control-plane process (kube-controller-manager,
// kube-scheduler) with its output in a log file.
type component struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	err     error // why the process exited; read after exited is closed
}

func startComponent(name, binary, logPath string, args []string) (*component, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating the %s log: %w", name, err)
	}
	defer logFile.Close()
	cmd := exec.Command(binary, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Its own process group so Stop reaches anything it spawns, and killed
	// with this process so a crashed test leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &component{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// waitHealthy polls the component's health endpoint until it answers 200.
func (c *component) waitHealthy(ctx context.Context, url string) error {
	// The component serves a self-signed certificate from its --cert-dir;
	// only its health is read, on loopback.
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec
	}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.exited:
			return fmt.Errorf("%s exited (%v); see %s", c.name, c.err, c.logPath)
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy at %s: %w; see %s", c.name, url, ctx.Err(), c.logPath)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM to the component's process group, then SIGKILL if it
// has not exited within a few seconds, and waits for it.
func (c *component) stop() {
	pgid := -c.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-c.exited
	}
	// Reap anything the component spawned that outlived it.
	_ = syscall.Kill(pgid, syscall.SIGKILL)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("finding a free port: unexpected address %v", l.Addr())
	}
	return addr.Port, nil
}
