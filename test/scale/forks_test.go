package scale

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
	"github.com/turnlog/turnlog/test/e2e/e2ebuild"
	"github.com/turnlog/turnlog/test/localcluster"
)

var (
	flagForksStore   = flag.String("forks.store", "", "file (a file:// store, as `make dev`), versitygw (a local S3 server) or both, one after the other; empty: measure nothing")
	flagForksTurns   = flag.String("forks.turns", "100,1000,10000", "comma-separated turns of the source Sessions, each forked at head-10; the largest is also forked in the middle, that fork at its own head, and -forks.many times")
	flagForksMany    = flag.Int("forks.many", 200, "SessionForks of the largest source applied at once, at distinct cuts from its head back")
	flagForksOut     = flag.String("forks.out", "", "append each row as a JSON line to this file")
	flagForksBuild   = flag.String("forks.build-dir", "", "where hack/e2ebuild put turnlog; empty: build it here")
	flagForksArgs    = flag.String("forks.manager-args", "--poll-interval=30s", "extra flags for `turnlog manager`, space-separated (the default is make dev's)")
	flagForksTimeout = flag.Duration("forks.timeout", 20*time.Minute, "longest wait for the sources to be Current, and for a fork (or the -forks.many) to succeed and its child to be Current")
)

// The manager's --fork-prefix values (controllers.ForkPrefixReference and
// controllers.ForkPrefixCopy), each measured with a manager of its own.
var forkPrefixModes = []string{"reference", "copy"}

// ForkRow is what one fork, or the -forks.many forks applied at once,
// measured.
type ForkRow struct {
	Date  string `json:"date"`
	CPUs  int    `json:"cpus"`
	Store string `json:"store"`
	// ForkPrefixFlag is the manager's --fork-prefix.
	ForkPrefixFlag string `json:"forkPrefixFlag"`
	ManagerArgs    string `json:"managerArgs"`
	// Fork is what was forked: "head-10" (atSeq head-10, so the cut is the
	// source's last turn/end), "middle" (the turn/end halfway), "middle's
	// head-10" (the middle fork's child at its own head-10) or "many".
	Fork        string `json:"fork"`
	SourceTurns int    `json:"sourceTurns"`
	// SourceLogBytes are what the forked Session holds under its root's
	// log/: for a source itself a fork by reference, only the segment
	// with its cut and its references.json.
	SourceLogBytes int64 `json:"sourceLogBytes"`
	Forks          int   `json:"forks"`
	// CutSeq is the fork's cut (the first fork's, of many).
	CutSeq int64 `json:"cutSeq"`
	// Prefix is the forks' status.prefix: the value, or each value's count
	// when they differ.
	Prefix string `json:"prefix"`
	// From the first create to the last fork Succeeded, and to the last
	// child Ready and Current through its cut.
	SucceededSeconds float64 `json:"succeededSeconds"`
	CurrentSeconds   float64 `json:"currentSeconds"`
	// What the store holds under the children's roots, listed as soon as
	// every fork has Succeeded, and again once every child is Current
	// (its derived data written too); of the first, under log/ alone
	// (segments and references.json), the rest being derived data.
	SucceededBytes      int64 `json:"succeededBytes"`
	SucceededObjects    int   `json:"succeededObjects"`
	SucceededLogBytes   int64 `json:"succeededLogBytes"`
	SucceededLogObjects int   `json:"succeededLogObjects"`
	CurrentBytes        int64 `json:"currentBytes"`
	CurrentObjects      int   `json:"currentObjects"`
	// DiffSeconds is how long `kubectl turnlog diff SOURCE CHILD` takes
	// once the child is Current (the median of three), for the largest
	// source's forks.
	DiffSeconds float64 `json:"diffSeconds,omitempty"`
}

// TestForks measures what a SessionFork costs with the manager's two ways
// of seeding a child (--fork-prefix=reference, the default, and copy), on
// a local cluster with a process node, pod workers and a file:// store as
// `make dev` runs, and on versitygw: the time until the fork Succeeded and
// its child is Current, and the bytes and objects the child holds. Each
// source of -forks.turns turns is forked at head-10; the largest also in
// the middle, then that fork at its own head, then -forks.many times at
// once. `make bench-forks` runs it; without -forks.store it does nothing.
func TestForks(t *testing.T) {
	if *flagForksStore == "" {
		t.Skip("no -forks.store: run `make bench-forks`")
	}
	stores := []string{*flagForksStore}
	if *flagForksStore == "both" {
		stores = []string{"file", "versitygw"}
	}
	var turns []int
	for f := range strings.SplitSeq(*flagForksTurns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("-forks.turns: %q is not a positive number", f)
		}
		turns = append(turns, n)
	}
	slices.Sort(turns)
	if largest := turns[len(turns)-1]; *flagForksMany > largest {
		t.Fatalf("-forks.many=%d: the largest source has only %d turns to cut at", *flagForksMany, largest)
	}
	// The cluster's own client logs go to its components' log files.
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	tl := startForksCluster(t)
	var rows []ForkRow
	for _, st := range stores {
		b := tl.useStore(st)
		for _, mode := range forkPrefixModes {
			p := &forksPhase{tl: tl, logs: sessionlog.New(b), bucket: b, store: st, mode: mode, ns: "forks-" + st + "-" + mode}
			rows = append(rows, p.measure(turns)...)
		}
	}
	t.Log("\n" + forksTable(rows))
	if *flagForksOut != "" {
		f, err := os.OpenFile(*flagForksOut, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, row := range rows {
			line, _ := json.Marshal(row)
			fmt.Fprintf(f, "%s\n", line)
		}
	}
}

// startForksCluster starts the local cluster as `make dev` does: a process
// node whose pods are processes of this machine running the built turnlog
// as the worker image. The store is chosen per phase (useStore).
func startForksCluster(t *testing.T) *turnsCluster {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tl := &turnsCluster{t: t, dir: t.TempDir()}
	// What `make bench-forks` built before the test (outside its
	// timeout), else built here.
	var built e2ebuild.Artifacts
	if *flagForksBuild != "" {
		built, err = e2ebuild.Check(*flagForksBuild, false)
	} else {
		built, err = e2ebuild.Build(t.Context(), root, filepath.Join(tl.dir, "build"), false)
	}
	if err != nil {
		t.Fatal(err)
	}
	tl.turnlog = built.Turnlog
	tl.plugin = filepath.Join(tl.dir, "kubectl-turnlog")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", tl.plugin, "./cmd/kubectl-turnlog")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kubectl-turnlog: %v\n%s", err, out)
	}
	startCtx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	tl.cluster, err = localcluster.Start(startCtx, localcluster.Options{
		CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")},
		ManifestPaths:     []string{filepath.Join(root, "config", "admission", "forkedfrom_policy.yaml")},
		Images:            map[string]string{e2ebuild.WorkerImage: built.Turnlog},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tl.cluster.Stop(); err != nil {
			t.Error(err)
		}
	})
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = turnlogv1.AddToScheme(scheme)
	if tl.kube, err = client.New(tl.cluster.RESTConfig, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	return tl
}

// useStore points the cluster's next managers and namespaces at a new
// store of kind st and returns the store, opened for the harness to write
// sources into and list.
func (tl *turnsCluster) useStore(st string) store.Bucket {
	t := tl.t
	var b store.Bucket
	var err error
	switch st {
	case "file":
		dir := filepath.Join(tl.dir, "store")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		tl.storeURL = "file://" + dir
		tl.credentialsSecret, tl.credentials = "", nil
		b, err = store.Open(t.Context(), tl.storeURL, nil)
	case "versitygw":
		// On the loopback: the process node's worker pods are processes
		// of this machine. The manager reads the keys from the
		// environment, worker pods from the Secret, as a deployed manager
		// gives them.
		gw := versitygw.Start(t)
		tl.storeURL = gw.URL
		t.Setenv("AWS_ACCESS_KEY_ID", gw.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", gw.SecretKey)
		tl.credentialsSecret = "turnlog-store-credentials"
		tl.credentials = map[string]string{"AWS_ACCESS_KEY_ID": gw.AccessKey, "AWS_SECRET_ACCESS_KEY": gw.SecretKey}
		b, err = gw.Open(t.Context())
	default:
		t.Fatalf("-forks.store=%q: want file, versitygw or both", st)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// forksPhase is one store and one --fork-prefix: a namespace of its own,
// watched by a manager of its own, so that neither the other phases'
// Sessions nor their worker pods are its manager's work.
type forksPhase struct {
	tl     *turnsCluster
	logs   *sessionlog.Store
	bucket store.Bucket
	store  string
	mode   string
	ns     string
	args   string
}

// measure writes a source of each number of turns, starts the manager,
// waits for the sources to be Current, forks them, and stops the manager.
func (p *forksPhase) measure(turns []int) []ForkRow {
	t := p.tl.t
	p.tl.namespace(p.ns)
	sources := map[int]*turnlogv1.Session{}
	for _, n := range turns {
		sources[n] = p.writeSource(n)
	}
	m := p.startManager()
	began := time.Now()
	for _, n := range turns {
		p.waitCurrent(sources[n].Name, forkHead(n), began)
	}
	t.Logf("%s, --fork-prefix=%s: sources of %v turns Current after %.1fs", p.store, p.mode, turns, time.Since(began).Seconds())

	var rows []ForkRow
	n := turns[len(turns)-1]
	for _, k := range turns {
		head := p.forkAt(fmt.Sprintf("head-%d", k), sources[k].Name, forkHead(k)-10)
		rows = append(rows, p.fork("head-10", k, head))
		if k == n {
			rows[len(rows)-1].DiffSeconds = p.diff(sources[k].Name, head.Status.ChildName)
		}
	}
	middle := p.forkAt(fmt.Sprintf("middle-%d", n), sources[n].Name, forkHead(n)/2)
	rows = append(rows, p.fork("middle", n, middle))
	rows[len(rows)-1].DiffSeconds = p.diff(sources[n].Name, middle.Status.ChildName)
	// The middle fork's child, Current, ends with its cut: its own head.
	rows = append(rows, p.fork("middle's head-10", n, p.forkAt(middle.Name+"-head", middle.Name, *middle.Status.CutSeq-10)))
	var many []*turnlogv1.SessionFork
	for i := range *flagForksMany {
		many = append(many, p.forkAt(fmt.Sprintf("many-%03d", i), sources[n].Name, forkHead(n)-10-int64(i)*eventsPerTurn))
	}
	rows = append(rows, p.fork("many", n, many...))

	m.stop()
	// Its worker pods, which no manager serves any more, would take the
	// next phase's CPU.
	if err := p.tl.kube.DeleteAllOf(t.Context(), &appsv1.Deployment{}, client.InNamespace(p.ns), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	return rows
}

// diff runs `kubectl turnlog diff a b` three times, as a user would, and
// returns the median time.
func (p *forksPhase) diff(a, b string) float64 {
	t := p.tl.t
	var times []float64
	for range 3 {
		cmd := exec.CommandContext(t.Context(), p.tl.plugin, "diff", a, b, "--kubeconfig", p.tl.cluster.Kubeconfig, "-n", p.ns, "--store-url", p.tl.storeURL)
		began := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl turnlog diff %s %s: %v\n%s", a, b, err, out)
		}
		times = append(times, time.Since(began).Seconds())
	}
	slices.Sort(times)
	return times[1]
}

// startManager runs a manager in pod worker mode, as `make dev` does,
// watching the phase's namespace alone.
func (p *forksPhase) startManager() *managerProc {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(p.tl.t)))
	args := []string{"--worker-image=" + e2ebuild.WorkerImage, "--worker-mode=pod", "--worker-listen=" + addr, "--worker-endpoint=https://" + addr,
		"--watch-namespace=" + p.ns, "--fork-prefix=" + p.mode}
	args = append(args, strings.Fields(*flagForksArgs)...)
	if p.tl.credentialsSecret != "" {
		args = append(args, "--worker-credentials-secret="+p.tl.credentialsSecret)
	}
	p.args = strings.Join(args, " ")
	return p.tl.startManager(p.ns, args)
}

// eventsPerTurn is the length of forkTurnEvents' turns: more than 10, so
// that head-10 lies in the last turn and a fork there cuts at the head.
const eventsPerTurn = 12

// forkHead is the last seq of a source of n turns: its session/start, then
// the turns.
func forkHead(n int) int64 { return int64(n) * eventsPerTurn }

// forkTurnEvents is one turn: a question and an answer of about 800 bytes
// streamed in seven chunks.
func forkTurnEvents(turn int) [][]byte {
	e := func(format string, args ...any) []byte {
		return fmt.Appendf(nil, `{"turn":%d,`+format+`}`, append([]any{turn}, args...)...)
	}
	events := [][]byte{
		e(`"type":"turn/start"`),
		e(`"type":"user/message","content":[{"type":"text","text":"question %d: which deploy moved the p99 latency, and why?"}]`, turn),
		e(`"type":"response/start","response":0,"adapter":%s`, adapter),
	}
	for i := range 7 {
		events = append(events, e(`"type":"chunk","response":0,"block":0,"delta":{"type":"text","text":"Part %d of answer %d: the rise starts with Tuesday's deploy, which halved the cache and doubled the misses. "}`, i, turn))
	}
	return append(events,
		e(`"type":"response/finish","response":0,"stopReason":"stop","replayState":{"kind":"pi-ai","version":2,"response":{"id":"msg_%d","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"},"blocks":[{"type":"text","signature":null}]}`, turn),
		e(`"type":"turn/end","reason":"stop"`),
	)
}

// writeSource creates Session src-N and writes its log of n turns straight
// into the store, 28 turns a segment, as a host flushing every few turns.
func (p *forksPhase) writeSource(n int) *turnlogv1.Session {
	t := p.tl.t
	s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: fmt.Sprintf("src-%d", n)}}
	p.tl.create(s)
	l, err := p.logs.Log(p.location(s))
	if err != nil {
		t.Fatal(err)
	}
	a := l.NewAppender("forks")
	seg := [][]byte{startEvent()}
	for turn := 1; turn <= n; turn++ {
		seg = append(seg, forkTurnEvents(turn)...)
		if turn%28 == 0 || turn == n {
			if _, err := a.Append(t.Context(), seg...); err != nil {
				t.Fatal(err)
			}
			seg = nil
		}
	}
	return s
}

// location is where the manager keeps a Session's log: its store is
// --store-url alone, with no prefix.
func (p *forksPhase) location(s *turnlogv1.Session) sessionlog.Location {
	return sessionlog.Location{Namespace: s.Namespace, Session: s.Name, UID: string(s.UID)}
}

// forkAt is a SessionFork of source at atSeq, its child named after it.
func (p *forksPhase) forkAt(name, source string, atSeq int64) *turnlogv1.SessionFork {
	return &turnlogv1.SessionFork{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name},
		Spec:       turnlogv1.SessionForkSpec{Source: turnlogv1.SessionReference{Name: source}, AtSeq: strconv.FormatInt(atSeq, 10)},
	}
}

// waitCurrent waits until Session name is Ready and Current through head.
func (p *forksPhase) waitCurrent(name string, head int64, since time.Time) {
	t := p.tl.t
	for {
		s := &turnlogv1.Session{}
		if err := p.tl.kube.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: name}, s); err != nil {
			t.Fatal(err)
		}
		if currentThrough(s, head) {
			return
		}
		if time.Since(since) > *flagForksTimeout {
			t.Fatalf("%s: Session %s not Current through seq %d after %s:\n%s", p.phase(), name, head, *flagForksTimeout, p.describe(nil, []string{name}))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fork creates forks one after another and waits until each has Succeeded
// and its child is Current through the cut, listing the store under the
// children's roots once all have Succeeded and again once all are Current.
// It leaves each fork's status in forks.
func (p *forksPhase) fork(what string, sourceTurns int, forks ...*turnlogv1.SessionFork) ForkRow {
	t := p.tl.t
	ctx := t.Context()
	row := ForkRow{
		Date: time.Now().UTC().Format(time.DateOnly), CPUs: runtime.NumCPU(), Store: p.store, ForkPrefixFlag: p.mode, ManagerArgs: p.args,
		Fork: what, SourceTurns: sourceTurns, Forks: len(forks),
	}
	source := &turnlogv1.Session{}
	if err := p.tl.kube.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: forks[0].Spec.Source.Name}, source); err != nil {
		t.Fatal(err)
	}
	srcRoot, _ := p.location(source).Root()
	row.SourceLogBytes, _ = p.stored(srcRoot + logDir)

	byName := map[string]*turnlogv1.SessionFork{}
	began := time.Now()
	for _, f := range forks {
		p.tl.create(f)
		byName[f.Name] = f
	}
	// A lone fork is looked at often, so that its times are its own; a
	// List of hundreds every 50 ms would load the API server the manager
	// needs.
	interval := 50 * time.Millisecond
	if len(forks) > 1 {
		interval = 500 * time.Millisecond
	}
	succeeded, current := map[string]bool{}, map[string]bool{}
	var roots []string
	for {
		list := &turnlogv1.SessionForkList{}
		if err := p.tl.kube.List(ctx, list, client.InNamespace(p.ns)); err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			f := &list.Items[i]
			if byName[f.Name] == nil || succeeded[f.Name] {
				continue
			}
			*byName[f.Name] = *f
			c := meta.FindStatusCondition(f.Status.Conditions, turnlogv1.ConditionSucceeded)
			if c != nil && c.Status == metav1.ConditionFalse {
				t.Fatalf("%s: SessionFork %s failed:\n%s", p.phase(), f.Name, p.describe(forks, nil))
			}
			if c != nil && c.Status == metav1.ConditionTrue {
				succeeded[f.Name] = true
				row.SucceededSeconds = time.Since(began).Seconds()
			}
		}
		sessions := &turnlogv1.SessionList{}
		if err := p.tl.kube.List(ctx, sessions, client.InNamespace(p.ns)); err != nil {
			t.Fatal(err)
		}
		if roots == nil && len(succeeded) == len(forks) {
			for i := range sessions.Items {
				s := &sessions.Items[i]
				if f := byName[s.Name]; f != nil && s.Spec.ForkedFrom != nil && s.Spec.ForkedFrom.ForkUID == string(f.UID) {
					root, _ := p.location(s).Root()
					roots = append(roots, root)
				}
			}
			if len(roots) != len(forks) {
				t.Fatalf("%s: %d SessionForks Succeeded, but only %d of their children exist", p.phase(), len(forks), len(roots))
			}
			row.SucceededBytes, row.SucceededObjects = p.stored(roots...)
			var logs []string
			for _, root := range roots {
				logs = append(logs, root+logDir)
			}
			row.SucceededLogBytes, row.SucceededLogObjects = p.stored(logs...)
		}
		for i := range sessions.Items {
			s := &sessions.Items[i]
			if f := byName[s.Name]; f != nil && succeeded[s.Name] && !current[s.Name] && currentThrough(s, *f.Status.CutSeq) {
				current[s.Name] = true
				row.CurrentSeconds = time.Since(began).Seconds()
			}
		}
		if len(current) == len(forks) {
			break
		}
		if time.Since(began) > *flagForksTimeout {
			t.Fatalf("%s: after %s, %d of %d SessionForks Succeeded and %d children Current:\n%s",
				p.phase(), *flagForksTimeout, len(succeeded), len(forks), len(current), p.describe(forks, nil))
		}
		time.Sleep(interval)
	}
	row.CurrentBytes, row.CurrentObjects = p.stored(roots...)
	row.CutSeq = *forks[0].Status.CutSeq
	prefixes := map[string]int{}
	for _, f := range forks {
		prefixes[f.Status.Prefix]++
	}
	row.Prefix = summarize(prefixes)
	line, _ := json.Marshal(row)
	t.Logf("result: %s", line)
	return row
}

// logDir holds a Session's log under its root (docs/log-format.md,
// "Storage layout").
const logDir = "log/"

// stored is the bytes and the number of objects under the roots.
func (p *forksPhase) stored(roots ...string) (bytes int64, objects int) {
	t := p.tl.t
	for _, root := range roots {
		for o, err := range p.bucket.List(t.Context(), root) {
			if err != nil {
				t.Fatal(err)
			}
			bytes += o.Size
			objects++
		}
	}
	return bytes, objects
}

func (p *forksPhase) phase() string { return p.store + ", --fork-prefix=" + p.mode }

// describe is what the cluster says of forks, their children and the
// Sessions named: conditions and the Events about them, for a failure's
// message (the manager's log is printed as the test ends).
func (p *forksPhase) describe(forks []*turnlogv1.SessionFork, sessions []string) string {
	ctx := p.tl.t.Context()
	var b strings.Builder
	about := map[string]bool{}
	for _, name := range sessions {
		about[name] = true
	}
	for _, f := range forks {
		about[f.Name] = true
		got := &turnlogv1.SessionFork{}
		if err := p.tl.kube.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
			fmt.Fprintf(&b, "SessionFork %s: %v\n", f.Name, err)
			continue
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, turnlogv1.ConditionSucceeded); c == nil || c.Status != metav1.ConditionTrue {
			fmt.Fprintf(&b, "SessionFork %s: prefix %q, conditions %s\n", f.Name, got.Status.Prefix, conditions(got.Status.Conditions))
		} else if got.Status.ChildName != "" {
			sessions = append(sessions, got.Status.ChildName)
		}
	}
	for _, name := range sessions {
		about[name] = true
		s := &turnlogv1.Session{}
		if err := p.tl.kube.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: name}, s); err != nil {
			fmt.Fprintf(&b, "Session %s: %v\n", name, err)
			continue
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady); c == nil || c.Reason != turnlogv1.ReasonCurrent {
			fmt.Fprintf(&b, "Session %s: conditions %s\n", name, conditions(s.Status.Conditions))
		}
	}
	events := &eventsv1.EventList{}
	if err := p.tl.kube.List(ctx, events, client.InNamespace(p.ns)); err != nil {
		fmt.Fprintf(&b, "events: %v\n", err)
	}
	for _, e := range events.Items {
		if about[e.Regarding.Name] {
			fmt.Fprintf(&b, "event %s %s %s %s: %s\n", e.Type, e.Regarding.Kind, e.Regarding.Name, e.Reason, e.Note)
		}
	}
	return b.String()
}

func conditions(cs []metav1.Condition) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s/%s (%s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, "; ")
}

// summarize is the one value counted, or each value with its count.
func summarize(counts map[string]int) string {
	if len(counts) == 1 {
		for v := range counts {
			return v
		}
	}
	var out []string
	for _, v := range slices.Sorted(maps.Keys(counts)) {
		out = append(out, fmt.Sprintf("%d %s", counts[v], v))
	}
	return strings.Join(out, ", ")
}

// forksTable prints the rows, a fork (or the many) a line.
func forksTable(rows []ForkRow) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "store\t--fork-prefix\tfork\tsource turns\tsource log/\tforks\tcut\tstatus.prefix\t-> Succeeded\t-> Current\tchildren's log/ at Succeeded\tall at Succeeded\tall at Current\tdiff\t\n")
	for _, r := range rows {
		diff := "-"
		if r.DiffSeconds > 0 {
			diff = fmt.Sprintf("%.2f s", r.DiffSeconds)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%.2f s\t%.2f s\t%s, %d obj\t%s, %d obj\t%s, %d obj\t%s\t\n",
			r.Store, r.ForkPrefixFlag, r.Fork, r.SourceTurns, size(r.SourceLogBytes), r.Forks, r.CutSeq, r.Prefix,
			r.SucceededSeconds, r.CurrentSeconds, size(r.SucceededLogBytes), r.SucceededLogObjects,
			size(r.SucceededBytes), r.SucceededObjects, size(r.CurrentBytes), r.CurrentObjects, diff)
	}
	w.Flush()
	fmt.Fprintf(&b, "%d CPUs; managers in pod worker mode with %s\n", runtime.NumCPU(), *flagForksArgs)
	return b.String()
}

// size is bytes in KiB or MiB.
func size(bytes int64) string {
	if bytes < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(bytes)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(bytes)/(1<<20))
}
