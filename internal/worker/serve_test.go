package worker

import (
	"bytes"
	"context"
	"encoding/pem"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/workerpool"
)

// TestServeUsage: `turnlog worker serve` without what it needs exits 2
// with one line saying what is missing, before it reaches for a manager.
func TestServeUsage(t *testing.T) {
	cases := []struct {
		name      string
		args      []string
		token, ca string
		want      string
	}{
		{"no endpoint", []string{"--namespace=team-a"}, "tok", "ca", "--endpoint and --namespace are required"},
		{"no namespace", []string{"--endpoint=https://manager:9443"}, "tok", "ca", "--endpoint and --namespace are required"},
		{"a stray argument", []string{"--endpoint=https://manager:9443", "--namespace=team-a", "extra"}, "tok", "ca", "and nothing else"},
		{"no token", []string{"--endpoint=https://manager:9443", "--namespace=team-a"}, "", "ca", EnvToken + " and " + EnvCA + " must be set"},
		{"no CA", []string{"--endpoint=https://manager:9443", "--namespace=team-a"}, "tok", "", EnvToken + " and " + EnvCA + " must be set"},
		{"no runs", []string{"--endpoint=https://manager:9443", "--namespace=team-a", "--runs=0"}, "tok", "ca", "--runs 0: must be at least 1"},
		{"negative runs", []string{"--endpoint=https://manager:9443", "--namespace=team-a", "--runs", "-3"}, "tok", "ca", "--runs -3: must be at least 1"},
		{"plain http", []string{"--endpoint=http://manager:9443", "--namespace=team-a"}, "tok", "ca", "want https://HOST:PORT"},
		{"a CA that is not PEM", []string{"--endpoint=https://manager:9443", "--namespace=team-a"}, "tok", "not a certificate", "no PEM certificate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvToken, c.token)
			t.Setenv(EnvCA, c.ca)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			var stderr bytes.Buffer
			if code := Serve(ctx, c.args, &stderr); code != 2 {
				t.Fatalf("Serve(%q) = %d, want 2; stderr %q", c.args, code, stderr.String())
			}
			msg := stderr.String()
			if !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 || !strings.HasSuffix(msg, "\n") {
				t.Errorf("Serve(%q) said %q, want one line saying %q", c.args, msg, c.want)
			}
			if !strings.HasPrefix(msg, "turnlog worker serve: ") {
				t.Errorf("Serve(%q) said %q, want it to name the command", c.args, msg)
			}
		})
	}
}

// TestServeRefusedByManager: a pod whose token the manager refuses (the
// manager restarted with a new key) exits 1 saying so, without waiting.
func TestServeRefusedByManager(t *testing.T) {
	board := workerpool.NewBoard(workerpool.Options{})
	srv := httptest.NewTLSServer(workerpool.Handler(board, workerpool.Tokens{Key: []byte("new key")}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	t.Setenv(EnvToken, workerpool.Tokens{Key: []byte("old key")}.Token("team-a"))
	t.Setenv(EnvCA, string(ca))
	t.Setenv(EnvPod, "pod-1")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	if code := Serve(ctx, []string{"--endpoint=" + srv.URL, "--namespace=team-a"}, &stderr); code != 1 {
		t.Fatalf("Serve with a stale token = %d, want 1; stderr %q", code, stderr.String())
	}
	if ctx.Err() != nil {
		t.Error("Serve returned only when its context ended")
	}
	if !strings.Contains(stderr.String(), workerpool.ErrUnauthorized.Error()) {
		t.Errorf("stderr %q does not say the manager refused the token", stderr.String())
	}
}

func TestExecuteArgsRefuses(t *testing.T) {
	open := func(context.Context, string, sessionlog.Location) (derived.Log, func() error, error) {
		t.Error("a refused command line opened a store")
		return nil, nil, context.Canceled
	}
	other := Invocation{Task: derived.TaskReplay, StoreURL: "mem://", Location: sessionlog.Location{Namespace: "team-b", Session: "chat", UID: "u1"}}

	_, err := executeArgs(t.Context(), other.Args(), "team-a", open)
	if err == nil || !strings.Contains(err.Error(), "team-b") || !strings.Contains(err.Error(), "team-a") {
		t.Errorf("a run of team-b handed to a pod of team-a: err %v, want refused naming both namespaces", err)
	}

	for _, args := range [][]string{
		nil,
		{},
		{"sh", "-c", "cat /var/run/secrets/token"},
		other.Args()[1:], // the task without "worker"
		append([]string{"serve"}, other.Args()[1:]...),
	} {
		if msg, err := executeArgs(t.Context(), args, "team-b", open); err == nil || msg != "" {
			t.Errorf("executeArgs(%q) = %q, %v; want refused", args, msg, err)
		} else if !strings.Contains(err.Error(), "not a worker command line") {
			t.Errorf("executeArgs(%q): %v, want it to say it is not a worker command line", args, err)
		}
	}

	// A worker command line that does not parse is refused too, naming it.
	bad := append(other.Args(), "extra")
	if _, err := executeArgs(t.Context(), bad, "team-b", open); err == nil || !strings.Contains(err.Error(), "and nothing else") {
		t.Errorf("executeArgs(%q) = %v, want refused with the parser's words", bad, err)
	}
}
