package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// TestManagerRefusesBadStores: a misconfigured store stops the manager at
// start with one line naming the flag or the file line, before it talks
// to any API server.
func TestManagerRefusesBadStores(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "stores")
	if err := os.WriteFile(file, []byte("default mem://\n\n# archive\narchive gs://b?private_key_path=/dev/zero\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dup := filepath.Join(dir, "dup")
	if err := os.WriteFile(dup, []byte("logs mem://\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--store", "logs=s3://b?profile=admin"}, 2, `--store "logs=s3://b?profile=admin": store logs: open bucket s3://b?profile=admin: parameter "profile" is not supported for s3:// URLs`},
		{[]string{"--store", "Logs=mem://"}, 2, `store name "Logs"`},
		{[]string{"--store", "mem://"}, 2, "want NAME=URL"},
		{[]string{"--stores-file", file}, 1, file + `:4: store archive: open bucket gs://b?private_key_path=/dev/zero: parameter "private_key_path" is not supported for gs:// URLs (supported: none)`},
		{[]string{"--store", "logs=mem://", "--stores-file", dup}, 1, "store logs is configured twice"},
		{[]string{"--store-url", "ftp://x"}, 1, `unsupported scheme "ftp"`},
		{nil, 1, "no store configured: give --store-url, --store or --stores-file"},
		{[]string{"--store-url", "mem://", "--worker-cpu-request", "2", "--worker-cpu-limit", "1"}, 2, "--worker-cpu-limit 1 is below --worker-cpu-request 2"},
		{[]string{"--store-url", "mem://", "--worker-max-failures", "0"}, 2, "--worker-max-failures 0: must be at least 1"},
		{[]string{"--store-url", "mem://", "--watch-namespace", "Team_A"}, 2, `"Team_A"`},
		{[]string{"--store-url", "mem://", "--shard", "Shard_1"}, 2, `shard "Shard_1": a lowercase RFC 1123 label`},
		{[]string{"--store-url", "mem://", "--namespace-concurrent-reconciles", "4"}, 2, "--namespace-concurrent-reconciles 4: must be below --concurrent-reconciles 4, or one namespace can hold every reconcile"},
		{[]string{"--store-url", "mem://", "--fork-copies", "0"}, 2, "--fork-copies 0: must be at least 1"},
		{[]string{"--store-url", "mem://", "--namespace-reconcile-rate", "-1"}, 2, "--namespace-reconcile-rate -1: must not be negative"},
	} {
		var stdout, stderr strings.Builder
		code := run(context.Background(), append([]string{"manager"}, c.args...), strings.NewReader(""), &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("manager %v: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}

func TestWorkerResources(t *testing.T) {
	r, err := workerResources("100m", "1", "512Mi")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Limits.Cpu().String(); got != "1" {
		t.Errorf("CPU limit %s, want 1", got)
	}
	if r, err = workerResources("100m", "0", "512Mi"); err != nil || !r.Limits.Cpu().IsZero() {
		t.Errorf("--worker-cpu-limit=0: limits %v, %v; want no CPU limit", r.Limits, err)
	}
}

// TestMemoryLimit: the manager's Go memory limit follows the container's
// (TURNLOG_MEMORY_LIMIT, from the Deployment's limits.memory), an explicit
// GOMEMLIMIT wins, and a value that is not a quantity stops the manager
// with one line naming it.
func TestMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	t.Setenv("GOMEMLIMIT", "")
	if err := setMemoryLimit("256Mi"); err != nil {
		t.Fatal(err)
	}
	if got, want := debug.SetMemoryLimit(-1), int64(256<<20)*9/10; got != want {
		t.Errorf("Go memory limit %d for a 256Mi container, want %d", got, want)
	}
	t.Setenv("GOMEMLIMIT", "100MiB")
	debug.SetMemoryLimit(1 << 40)
	if err := setMemoryLimit("256Mi"); err != nil || debug.SetMemoryLimit(-1) != 1<<40 {
		t.Errorf("GOMEMLIMIT set: the limit changed to %d (err %v)", debug.SetMemoryLimit(-1), err)
	}
	t.Setenv("GOMEMLIMIT", "")
	var stdout, stderr strings.Builder
	t.Setenv("TURNLOG_MEMORY_LIMIT", "lots")
	if code := run(context.Background(), []string{"manager", "--store-url", "mem://"}, strings.NewReader(""), &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), `TURNLOG_MEMORY_LIMIT "lots"`) {
		t.Errorf("TURNLOG_MEMORY_LIMIT=lots: exit %d, stderr %q", code, stderr.String())
	}
}

// TestManagerStopsOnSIGTERMWhileAStoreHangs: with a reconcile waiting on a
// store that never answers (and a --store-timeout far away), SIGTERM still
// stops the manager well within the pod's grace period
// (config/manager: terminationGracePeriodSeconds 30), so the kubelet
// never has to kill it in the middle of a write.
func TestManagerStopsOnSIGTERMWhileAStoreHangs(t *testing.T) {
	c, kubeconfig := startAPIServer(t)
	release := make(chan struct{})
	var asked atomic.Int32
	hung := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		asked.Add(1)
		<-release // no answer, whatever the client does
	}))
	t.Cleanup(func() { close(release); hung.Close() })

	var stderr strings.Builder
	cmd := exec.Command(turnlogBin, "manager", "--worker-mode=local", "--store-timeout=10m",
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--store-url=s3://logs?region=us-east-1&use_path_style=true&disable_https=true&endpoint="+url.QueryEscape(hung.URL))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig,
		"AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "AWS_EC2_METADATA_DISABLED=true")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	session := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hung"}}
	if err := c.Create(t.Context(), session); err != nil {
		t.Fatal(err)
	}
	for asked.Load() == 0 {
		select {
		case err := <-exited:
			t.Fatalf("the manager exited before it reached the store: %v\n%s", err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	time.Sleep(time.Second) // well inside the hung call
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		t.Logf("stopped %s after SIGTERM", time.Since(sent).Round(100*time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatalf("the manager was still running 30 s after SIGTERM, when the kubelet kills it\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "panic") {
		t.Errorf("the manager panicked on the way out:\n%s", stderr.String())
	}
}
