package pihost

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Env is one pi installation: its agent directory (models and settings),
// its working directory and where it keeps session files, with the pi
// package loaded and a fake provider as its models' provider.
type Env struct {
	tb       testing.TB
	Node     string // pi 1.x's pinned node
	CLI      string // pi's cli.js
	Pkg      string // pi-turnlog
	AgentDir string
	WorkDir  string
	Sessions string
	// Vars are pi's environment.
	Vars []string
	// Exts are more extensions pi loads.
	Exts []string
	// installed: the package is listed in the agent's settings.json
	// instead of given with -e.
	installed bool
}

// NewEnv makes a pi installation whose models "fake/model-a" and
// "fake/model-b" are served by prov, and whose package records into the
// Session ns/session (uid may be empty) of the store at storeURL.
func NewEnv(tb testing.TB, prov *Provider, storeURL, ns, session, uid string) *Env {
	tb.Helper()
	node, cli, pkg := Paths(tb)
	dir := tb.TempDir()
	e := &Env{tb: tb, Node: node, CLI: cli, Pkg: pkg,
		AgentDir: filepath.Join(dir, "agent"), WorkDir: filepath.Join(dir, "work"), Sessions: filepath.Join(dir, "sessions")}
	for _, d := range []string{e.AgentDir, e.WorkDir, e.Sessions, filepath.Join(dir, "home")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	model := func(id string) map[string]any {
		return map[string]any{"id": id, "name": id, "reasoning": true, "input": []string{"text"},
			"cost":          map[string]any{"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
			"contextWindow": 200000, "maxTokens": 4096}
	}
	writeJSON(tb, filepath.Join(e.AgentDir, "models.json"), map[string]any{"providers": map[string]any{
		"fake": map[string]any{"baseUrl": prov.URL(), "apiKey": "fake-key", "api": "anthropic-messages",
			"models": []any{model("model-a"), model("model-b")}}}})
	writeJSON(tb, filepath.Join(e.AgentDir, "settings.json"), map[string]any{
		"retry":      map[string]any{"enabled": false},
		"compaction": map[string]any{"enabled": false, "keepRecentTokens": 1},
	})
	if err := os.WriteFile(filepath.Join(e.WorkDir, "notes.txt"), []byte("the launch is on tuesday\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	e.Vars = []string{
		"HOME=" + filepath.Join(dir, "home"), "PATH=" + os.Getenv("PATH"),
		"PI_CODING_AGENT_DIR=" + e.AgentDir, "PI_OFFLINE=1", "PI_SKIP_VERSION_CHECK=1", "PI_TELEMETRY=0",
		"TURNLOG_STORE_URL=" + storeURL, "TURNLOG_NAMESPACE=" + ns, "TURNLOG_SESSION=" + session, "TURNLOG_SESSION_UID=" + uid,
	}
	return e
}

// Install lists the package in pi's settings, as a user installs it for
// good, instead of loading it with -e.
func (e *Env) Install() {
	path := filepath.Join(e.AgentDir, "settings.json")
	data, err := os.ReadFile(path)
	if err != nil {
		e.tb.Fatal(err)
	}
	var settings map[string]any
	if err := json.Unmarshal(data, &settings); err != nil {
		e.tb.Fatal(err)
	}
	settings["extensions"] = []string{e.Pkg}
	writeJSON(e.tb, path, settings)
	e.installed = true
}

func writeJSON(tb testing.TB, path string, v any) {
	tb.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Pi is a pi process in RPC mode.
type Pi struct {
	tb     testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedWriter
	recs   chan map[string]any
	exited chan struct{}
	ids    int
	// Status is the package's last status line: what it has acknowledged.
	Status string
	// Settled: an agent_settled came since the last prompt.
	Settled bool
	// Notes are the package's notices, in order.
	Notes []string
}

// Start runs pi in RPC mode with the package loaded; extra are more
// arguments (--session FILE to resume one). It is killed when the test
// ends, if it has not exited.
func (e *Env) Start(extra ...string) *Pi {
	tb := e.tb
	args := []string{e.CLI, "--mode", "rpc", "--provider", "fake", "--model", "model-a", "--session-dir", e.Sessions, "--no-context-files"}
	if !e.installed {
		args = append(args, "-e", e.Pkg)
	}
	args = append(args, extra...)
	for _, x := range e.Exts {
		args = append(args, "-e", x)
	}
	cmd := exec.Command(e.Node, args...)
	cmd.Dir = e.WorkDir
	cmd.Env = e.Vars
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	p := &Pi{tb: tb, cmd: cmd, stdin: stdin, stderr: &lockedWriter{}, recs: make(chan map[string]any, 100000), exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		br := bufio.NewReaderSize(stdout, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			if len(bytes.TrimSpace(line)) > 0 {
				var rec map[string]any
				if json.Unmarshal(line, &rec) == nil {
					p.recs <- rec
				}
			}
			if err != nil {
				break
			}
		}
		_ = cmd.Wait()
		close(p.exited)
		close(p.recs)
	}()
	tb.Cleanup(func() { p.Kill() })
	return p
}

// lockedWriter collects what pi writes to stderr.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Stderr is what pi wrote to stderr so far.
func (p *Pi) Stderr() string { return p.stderr.String() }

// Kill kills pi and its children (SIGKILL), unless it has exited.
func (p *Pi) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

// Next returns the next record pi printed, failing after timeout.
func (p *Pi) Next(timeout time.Duration) map[string]any {
	p.tb.Helper()
	select {
	case rec, ok := <-p.recs:
		if !ok {
			p.tb.Fatalf("pi exited: %v\nstderr:\n%s", p.cmd.ProcessState, tail(p.stderr.String()))
		}
		p.note(rec)
		return rec
	case <-time.After(timeout):
		p.tb.Fatalf("pi printed nothing for %s\nstderr:\n%s", timeout, tail(p.stderr.String()))
	}
	return nil
}

// note keeps what a record says about the package: its status line and
// notices, and whether pi settled.
// PIRECORD_DEBUG=1 logs every record but the stream's deltas.
func (p *Pi) note(rec map[string]any) {
	if os.Getenv("PIRECORD_DEBUG") != "" && rec["type"] != "message_update" {
		p.tb.Logf("pi: %.300v", rec)
	}
	if rec["type"] == "extension_ui_request" && rec["method"] == "setStatus" && rec["statusKey"] == "turnlog" {
		p.Status, _ = rec["statusText"].(string)
	}
	if rec["type"] == "agent_settled" {
		p.Settled = true
	}
	if rec["type"] == "extension_ui_request" && rec["method"] == "notify" {
		msg, _ := rec["message"].(string)
		p.Notes = append(p.Notes, msg)
		if rec["notifyType"] == "error" {
			p.tb.Logf("pi notify (error): %s", msg)
		}
	}
}

// WaitFor reads records until one matches.
func (p *Pi) WaitFor(what string, match func(map[string]any) bool) map[string]any {
	p.tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if rec := p.Next(time.Until(deadline)); match(rec) {
			return rec
		}
	}
	p.tb.Fatalf("pi: no %s within 60 s", what)
	return nil
}

// Call sends a command and returns its response's data, failing on an error.
func (p *Pi) Call(cmd map[string]any) map[string]any {
	p.tb.Helper()
	p.ids++
	id := fmt.Sprintf("req-%d", p.ids)
	if cmd["type"] == "prompt" {
		p.Settled = false
	}
	cmd["id"] = id
	data, _ := json.Marshal(cmd)
	if _, err := p.stdin.Write(append(data, '\n')); err != nil {
		p.tb.Fatalf("write to pi: %v", err)
	}
	rec := p.WaitFor("response to "+id, func(r map[string]any) bool { return r["type"] == "response" && r["id"] == id })
	if rec["success"] != true {
		p.tb.Fatalf("pi %v: %v", cmd["type"], rec["error"])
	}
	d, _ := rec["data"].(map[string]any)
	return d
}

// Prompt sends a prompt and waits until pi has settled.
func (p *Pi) Prompt(text string) {
	p.tb.Helper()
	p.Call(map[string]any{"type": "prompt", "message": text})
	p.Settle()
}

// Settle waits until pi has settled since the last command.
func (p *Pi) Settle() {
	p.tb.Helper()
	if !p.Settled {
		p.WaitFor("agent_settled", func(r map[string]any) bool { return r["type"] == "agent_settled" })
	}
}

// Quit closes pi's input and waits for its orderly exit.
func (p *Pi) Quit() {
	p.tb.Helper()
	_ = p.stdin.Close()
	for {
		select {
		case rec, ok := <-p.recs:
			if ok {
				p.note(rec)
			}
			if !ok {
				if code := p.cmd.ProcessState.ExitCode(); code != 0 {
					p.tb.Fatalf("pi exited with %d\nstderr:\n%s", code, tail(p.stderr.String()))
				}
				return
			}
		case <-time.After(30 * time.Second):
			p.tb.Fatalf("pi did not exit after its input closed\nstderr:\n%s", tail(p.stderr.String()))
		}
	}
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}
