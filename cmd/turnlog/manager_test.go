package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
