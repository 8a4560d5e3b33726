package traces

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/controllers"
	"github.com/turnlog/turnlog/internal/telemetry"
	"github.com/turnlog/turnlog/internal/testutil/jaeger"
	"github.com/turnlog/turnlog/internal/worker"
	"github.com/turnlog/turnlog/turnlogtest"
)

// poolName is the worker Deployment, and its Secret, the manager makes in
// a namespace with runs.
const poolName = "turnlog-worker"

// TestPodRunsJoinTheReconcileTrace: with the manager in pod mode, a
// worker pod — `turnlog worker serve`, a process of its own, told what
// the manager's Deployment tells its pods — exports its runs' spans in
// the trace of the reconcile that submitted each run, as children of that
// reconcile's work step. The turns keep traces of their own.
func TestPodRunsJoinTheReconcileTrace(t *testing.T) {
	built := buildTurnlog(t)
	j := jaeger.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tel := exportTo(ctx, t, j)
	env := turnlogtest.Start(t, turnlogtest.WithWorkerMode(controllers.WorkerModePod))
	st, err := agenthost.OpenStore(ctx, env.StoreURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	chat, err := st.CreateSession(ctx, env.Client, "default", "chat", model)
	if err != nil {
		t.Fatal(err)
	}
	end := writeTurn(ctx, t, chat, true, conversation[0])

	pod := startWorkerPod(ctx, t, env, built.wait(t), j.OTLPHTTP)
	if _, err := chat.WaitTranscript(ctx, end); err != nil {
		t.Fatalf("%v; the worker pod's log:\n%s", err, pod.log())
	}
	pod.stop(t) // it exports what it queued as it stops

	waitPodRuns(ctx, t, j, tel, "worker assemble", "worker replay")
	for _, tr := range turnTraces(t, j, uidOf(ctx, t, env, "chat")) {
		if refs := root(tr).References; len(refs) > 0 {
			t.Errorf("the turn's %s has references %v, want none: the turn's trace is its own", root(tr).OperationName, refs)
		}
		for _, s := range tr.Spans {
			if svc := tr.Service(s); svc != telemetry.SessionsService {
				t.Errorf("the turn's trace holds %s of %s", s.OperationName, svc)
			}
		}
	}
}

// turnlogBuild is ./cmd/turnlog being built, the binary of the worker
// pods, while the test starts the rest.
type turnlogBuild struct {
	done chan struct{}
	bin  string
	out  []byte
	err  error
}

func buildTurnlog(t *testing.T) *turnlogBuild {
	b := &turnlogBuild{done: make(chan struct{}), bin: filepath.Join(t.TempDir(), "turnlog")}
	go func() {
		defer close(b.done)
		cmd := exec.Command("go", "build", "-o", b.bin, "./cmd/turnlog")
		cmd.Dir = filepath.Join("..", "..")
		b.out, b.err = cmd.CombinedOutput()
	}()
	t.Cleanup(func() { <-b.done })
	return b
}

// wait is the built binary's path.
func (b *turnlogBuild) wait(t *testing.T) string {
	t.Helper()
	<-b.done
	if b.err != nil {
		t.Fatalf("go build ./cmd/turnlog: %v\n%s", b.err, b.out)
	}
	return b.bin
}

// workerPod is `turnlog worker serve` in a process of its own.
type workerPod struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
}

// startWorkerPod waits for the worker Deployment the manager makes for
// the namespace's runs and runs its container's command line, with the
// environment its Secret gives, as a pod would, exporting to otlp.
func startWorkerPod(ctx context.Context, t *testing.T, env *turnlogtest.Env, bin, otlp string) *workerPod {
	t.Helper()
	var d appsv1.Deployment
	var secret corev1.Secret
	for {
		key := client.ObjectKey{Namespace: "default", Name: poolName}
		if env.Client.Get(ctx, key, &d) == nil && env.Client.Get(ctx, key, &secret) == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the manager made no worker Deployment and Secret %s", poolName)
		case <-time.After(100 * time.Millisecond):
		}
	}
	args := append(slices.Clone(d.Spec.Template.Spec.Containers[0].Args), "--otlp-endpoint="+otlp)
	p := &workerPod{logPath: filepath.Join(t.TempDir(), "worker.log"), exited: make(chan struct{})}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.Env = append(withoutOTel(os.Environ()),
		worker.EnvToken+"="+string(secret.Data["token"]),
		worker.EnvCA+"="+string(secret.Data["ca.crt"]),
		worker.EnvPod+"="+poolName+"-test")
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// withoutOTel is environ without the OTEL_ variables: the pod exports
// where its flags say.
func withoutOTel(environ []string) []string {
	return slices.DeleteFunc(slices.Clone(environ), func(kv string) bool { return strings.HasPrefix(kv, "OTEL_") })
}

// stop stops the pod as Kubernetes does, with SIGTERM, and waits for it.
func (p *workerPod) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("the worker pod did not stop on SIGTERM; its log:\n%s", p.log())
	}
}

func (p *workerPod) log() string {
	data, _ := os.ReadFile(p.logPath)
	return string(data)
}

// waitPodRuns waits until Jaeger holds the worker pod's spans of each of
// operations, each in the trace of the reconcile that submitted its run
// (podRunProblems), flushing the manager's spans each time: a reconcile's
// span ends after its work step's, and may end after the run it submitted
// is done. It fails the test with what is still wrong when ctx ends.
func waitPodRuns(ctx context.Context, t *testing.T, j *jaeger.Jaeger, tel *telemetry.Telemetry, operations ...string) {
	t.Helper()
	for {
		flush, done := context.WithTimeout(context.Background(), 30*time.Second)
		err := tel.ForceFlush(flush)
		done()
		if err != nil {
			t.Fatalf("flush the manager's spans: %v", err)
		}
		traces, err := j.Traces("turnlog-worker", nil, 100)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, tr := range traces {
			for _, s := range tr.Spans {
				seen[s.OperationName] = true
			}
		}
		var problems []string
		for _, op := range operations {
			if !seen[op] {
				problems = append(problems, fmt.Sprintf("Jaeger holds no %s span of turnlog-worker", op))
			}
		}
		problems = append(problems, podRunProblems(traces)...)
		if len(problems) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			for _, p := range problems {
				t.Error(p)
			}
			t.FailNow()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// podRunProblems: each of the worker pod's run spans must be the child of
// the manager's work step that submitted it, itself a step of a reconcile
// of the Session: one trace from the reconcile to the run.
func podRunProblems(traces []jaeger.Trace) []string {
	var problems []string
	for _, tr := range traces {
		for _, s := range tr.Spans {
			if !strings.HasPrefix(s.OperationName, "worker ") {
				continue
			}
			if svc := tr.Service(s); svc != "turnlog-worker" {
				problems = append(problems, fmt.Sprintf("%s was sent by %s, want the worker pod (turnlog-worker)", s.OperationName, svc))
			}
			step, ok := parentIn(tr, s)
			if !ok || step.OperationName != "reconcileWork" || tr.Service(step) != "turnlog-manager" {
				problems = append(problems, fmt.Sprintf("%s: parent %s, want the manager's reconcileWork in its trace %s", s.OperationName, describe(tr, step, ok), tr.TraceID))
				continue
			}
			reconcile, ok := parentIn(tr, step)
			if !ok || reconcile.OperationName != "reconcile Session" || reconcile.Tag("turnlog.session") != "chat" {
				problems = append(problems, fmt.Sprintf("%s: its step's parent %s, want reconcile Session of chat", s.OperationName, describe(tr, reconcile, ok)))
			}
		}
	}
	return problems
}

// parentIn is s's parent span, when the trace holds it.
func parentIn(tr jaeger.Trace, s jaeger.Span) (jaeger.Span, bool) {
	for _, r := range s.References {
		if r.RefType != "CHILD_OF" || r.TraceID != tr.TraceID {
			continue
		}
		for _, p := range tr.Spans {
			if p.SpanID == r.SpanID {
				return p, true
			}
		}
	}
	return jaeger.Span{}, false
}

func describe(tr jaeger.Trace, s jaeger.Span, ok bool) string {
	if !ok {
		return "none in the trace"
	}
	return fmt.Sprintf("%s of %s", s.OperationName, tr.Service(s))
}
