package scale

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/testutil/controlplane"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/kubeapply"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
)

var (
	flagN       = flag.String("scale.n", "", "comma-separated numbers of Sessions to measure, e.g. 1000,5000,10000; empty: measure nothing")
	flagArgs    = flag.String("scale.manager-args", "", "extra flags for `turnlog manager`, space-separated")
	flagStore   = flag.String("scale.store", "file", "file (file:// store) or versitygw (a local S3 server)")
	flagSettle  = flag.Duration("scale.settle", 30*time.Second, "wait after every Session is Ready before measuring the idle cost")
	flagWindow  = flag.Duration("scale.window", 2*time.Minute, "how long idle Sessions are measured")
	flagProbes  = flag.Int("scale.appends", 10, "appends whose time to reach status is measured, with a nudge and without")
	flagSilent  = flag.Duration("scale.unnudged-timeout", 0, "how long to wait for an append without a nudge to reach status; 0 skips that measurement")
	flagRestart = flag.Duration("scale.restart-timeout", 10*time.Minute, "longest wait for a restarted manager to reconcile every Session")
	flagOut     = flag.String("scale.out", "", "append each result as a JSON line to this file")
	flagShards  = flag.Int("scale.shards", 0, "spread the Sessions over this many shards, each with a manager of its own (config/shards' admission policy labels them); 0: one manager, no shards")
)

// namespace holds the Sessions of a run.
const namespace = "scale"

// Result is what one run measured. In a sharded run (-scale.shards) the
// manager's costs are the sums over the shards' managers (their memory
// added up, their requests per Session over every Session), each shard's
// own are in PerShard, and the restart is of one shard's manager while the
// others go on.
type Result struct {
	Sessions    int    `json:"sessions"`
	Store       string `json:"store"`
	ManagerArgs string `json:"managerArgs"`
	Events      int64  `json:"logEvents"`
	Shards      int    `json:"shards,omitempty"`

	// Cold start: a manager meeting every Session for the first time.
	ReadySeconds float64 `json:"readySeconds"`
	ManagerCost

	// Idle: every Session Ready, nothing appended.
	IdleWindowSeconds float64 `json:"idleWindowSeconds"`
	// IdleStatusWrites counts Sessions whose object changed in the window.
	IdleStatusWrites  int64 `json:"idleSessionsWritten"`
	IdleEventsCreated int64 `json:"idleEventsCreated"`

	// Appends.
	NudgedMillis   []float64 `json:"nudgedAppendMillis"`
	UnnudgedMillis []float64 `json:"unnudgedAppendMillis,omitempty"`

	// Restart: a new manager process over the same Sessions (in a sharded
	// run, over RestartShard's, RestartSessions of them).
	RestartShard      string           `json:"restartShard,omitempty"`
	RestartSessions   int              `json:"restartSessions"`
	RestartSeconds    float64          `json:"restartSeconds"`
	RestartReconciles float64          `json:"restartReconciles"`
	RestartRSSMiB     float64          `json:"restartRssMiB"`
	RestartAPI        map[string]int64 `json:"restartApiRequests"`
	RestartStore      map[string]int64 `json:"restartStoreRequests"`
	// RestartWorkerRuns counts derived-data writes after the restart: each
	// worker run writes some, so 0 means no run was repeated.
	RestartWorkerRuns int64 `json:"restartDerivedWrites"`
	// RestartOthersMillis are nudged appends to the other shards' Sessions
	// made while the restarted shard's manager was starting: what its
	// restart cost the tenants of the others.
	RestartOthersMillis []float64 `json:"restartOtherShardsAppendMillis,omitempty"`

	PerShard []ShardResult `json:"perShard,omitempty"`
}

// ManagerCost is what a manager (or the managers of every shard,
// together) cost from the cold start through the idle window.
type ManagerCost struct {
	ColdReconciles float64          `json:"coldReconciles"`
	ColdAPI        map[string]int64 `json:"coldApiRequests"`
	ColdStore      map[string]int64 `json:"coldStoreRequests"`

	IdleRSSMiB          float64            `json:"idleRssMiB"`
	PeakRSSMiB          float64            `json:"peakRssMiB"`
	HeapMiB             float64            `json:"heapInuseMiB"`
	IdleStorePerHour    map[string]float64 `json:"idleStoreRequestsPerSessionHour"`
	IdleReconcilesHour  float64            `json:"idleReconcilesPerSessionHour"`
	IdleAPIPerHour      map[string]float64 `json:"idleApiRequestsPerSessionHour"`
	ReconcileMeanMillis float64            `json:"reconcileMeanMillis"`
}

// ShardResult is one shard's manager in a sharded run.
type ShardResult struct {
	Shard    string `json:"shard"`
	Sessions int    `json:"sessions"`
	ManagerCost
}

func TestScale(t *testing.T) {
	if *flagN == "" {
		t.Skip("no -scale.n: run `make bench-scale`")
	}
	for _, f := range strings.Split(*flagN, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("-scale.n: %q is not a positive number", f)
		}
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			res := measure(t, n)
			line, _ := json.Marshal(res)
			t.Logf("result: %s", line)
			if *flagOut != "" {
				f, err := os.OpenFile(*flagOut, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				fmt.Fprintf(f, "%s\n", line)
			}
		})
	}
}

// harness is one run's control plane, store and manager binary.
type harness struct {
	t          *testing.T
	ctx        context.Context
	c          client.Client
	kubeconfig string
	storeURL   string
	storeEnv   []string
	logs       *sessionlog.Store
	bin        string
	dir        string
	names      []string
	heads      []int64
	// shards are the names' shards (all "" in an unsharded run).
	shards []string
}

func measure(t *testing.T, n int) Result {
	h := start(t)
	res := Result{Sessions: n, Store: *flagStore, ManagerArgs: *flagArgs, Shards: *flagShards}
	res.Events = h.createSessions(n)

	// Cold start.
	ms := h.managers("cold")
	began := time.Now()
	h.waitReady(n, began)
	res.ReadySeconds = time.Since(began).Seconds()
	cold := scrapeAll(ms)
	t.Logf("%d Sessions Ready %.1fs after the manager started", n, res.ReadySeconds)

	// Idle.
	time.Sleep(*flagSettle)
	before, seenBefore := scrapeAll(ms), h.snapshot()
	time.Sleep(*flagWindow)
	after, seenAfter := scrapeAll(ms), h.snapshot()
	res.IdleWindowSeconds = flagWindow.Seconds()
	var all []ShardResult
	for i, m := range ms {
		c := costOf(cold[i], before[i], after[i], len(h.inShard(m.shard)), m)
		all = append(all, ShardResult{Shard: m.shard, Sessions: len(h.inShard(m.shard)), ManagerCost: c})
	}
	res.ManagerCost = costOf(sum(cold), sum(before), sum(after), n, ms...)
	if len(ms) > 1 {
		res.PerShard = all
	}
	res.IdleStatusWrites = written(seenBefore, seenAfter)
	res.IdleEventsCreated = int64(seenAfter.events - seenBefore.events)
	t.Logf("idle: RSS %.0f MiB (peak %.0f), store requests per Session per hour %v, status patches %d", res.IdleRSSMiB, res.PeakRSSMiB, res.IdleStorePerHour, res.IdleStatusWrites)
	for _, s := range res.PerShard {
		t.Logf("shard %s: %d Sessions, RSS %.0f MiB (peak %.0f), store requests per Session per hour %v, API %v", s.Shard, s.Sessions, s.IdleRSSMiB, s.PeakRSSMiB, s.IdleStorePerHour, s.IdleAPIPerHour)
	}

	// Appends, with a nudge and without.
	res.NudgedMillis = h.appends(spread(h.inShard(""), *flagProbes, 0), true, 30*time.Second)
	if *flagSilent > 0 {
		res.UnnudgedMillis = h.appends(spread(h.inShard(""), *flagProbes, *flagProbes), false, *flagSilent)
	}
	t.Logf("appends reaching status: nudged %v ms, not nudged %v ms", res.NudgedMillis, res.UnnudgedMillis)
	h.restart(&res, ms)
	return res
}

// restart stops the first manager and starts another for its shard (the
// only manager of an unsharded run), measuring how long it takes to
// reconcile every Session of its shard again and what that costs; in a
// sharded run, nudged appends to the other shards' Sessions are measured
// meanwhile.
func (h *harness) restart(res *Result, ms []*managerProc) {
	t := h.t
	old := ms[0]
	own := h.inShard(old.shard)
	res.RestartShard, res.RestartSessions = old.shard, len(own)
	old.stop()
	m := h.manager("restart", old.shard)
	began := time.Now()
	if len(ms) > 1 {
		var others []int
		for _, o := range ms[1:] {
			others = append(others, h.inShard(o.shard)...)
		}
		res.RestartOthersMillis = h.appends(spread(others, *flagProbes, 0), true, 30*time.Second)
		t.Logf("appends to the other shards during the restart reaching status: %v ms", res.RestartOthersMillis)
	}
	deadline := began.Add(*flagRestart)
	for {
		restarted := m.scrape()
		if restarted.sum("controller_runtime_reconcile_total", `controller="session"`) >= float64(len(own)) &&
			restarted.has("turnlog_queue_depth", `controller="session"`) && restarted.sum("turnlog_queue_depth", `controller="session"`) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted manager did not reconcile %d Sessions within %s: %.0f reconciles, queue depth %.0f", len(own), *flagRestart,
				restarted.sum("controller_runtime_reconcile_total", `controller="session"`), restarted.sum("turnlog_queue_depth", `controller="session"`))
		}
		time.Sleep(200 * time.Millisecond)
	}
	res.RestartSeconds = time.Since(began).Seconds()
	h.waitReady(len(h.names), began)
	restarted := m.scrape()
	res.RestartReconciles = restarted.sum("controller_runtime_reconcile_total", `controller="session"`)
	res.RestartAPI = restarted.byLabel("rest_client_requests_total", "method")
	res.RestartStore = restarted.byLabel("turnlog_store_requests_total", "operation")
	res.RestartWorkerRuns = res.RestartStore["put"]
	res.RestartRSSMiB, _ = m.rss()
	t.Logf("restart: every Session of the shard reconciled after %.1fs; derived writes %d; store %v; API %v", res.RestartSeconds, res.RestartWorkerRuns, res.RestartStore, res.RestartAPI)
	for _, m := range append(ms[1:], m) {
		m.stop()
	}
}

// costOf is what managers cost over sessions, from their scrapes (summed
// if several) after the cold start and before and after the idle window.
func costOf(cold, before, after metricsText, sessions int, managers ...*managerProc) ManagerCost {
	perHour := 3600 / flagWindow.Seconds() / float64(sessions)
	c := ManagerCost{
		ColdReconciles:     cold.sum("controller_runtime_reconcile_total", `controller="session"`),
		ColdAPI:            cold.byLabel("rest_client_requests_total", "method"),
		ColdStore:          cold.byLabel("turnlog_store_requests_total", "operation"),
		HeapMiB:            after.sum("go_memstats_heap_inuse_bytes") / (1 << 20),
		IdleStorePerHour:   scaled(diff(after.byLabel("turnlog_store_requests_total", "operation"), before.byLabel("turnlog_store_requests_total", "operation")), perHour),
		IdleAPIPerHour:     scaled(diff(after.byLabel("rest_client_requests_total", "method"), before.byLabel("rest_client_requests_total", "method")), perHour),
		IdleReconcilesHour: (after.sum("controller_runtime_reconcile_total", `controller="session"`) - before.sum("controller_runtime_reconcile_total", `controller="session"`)) * perHour,
	}
	for _, m := range managers {
		now, peak := m.rss()
		c.IdleRSSMiB += now
		c.PeakRSSMiB += peak
	}
	if n := after.sum("controller_runtime_reconcile_time_seconds_count", `controller="session"`); n > 0 {
		c.ReconcileMeanMillis = 1000 * after.sum("controller_runtime_reconcile_time_seconds_sum", `controller="session"`) / n
	}
	return c
}

// start runs a control plane and opens the store.
func start(t *testing.T) *harness {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	cp := controlplane.Start(t, filepath.Join("..", ".."), controlplane.Options{QPS: 1000, Burst: 2000})
	c := cp.Client
	dir := t.TempDir()
	h := &harness{t: t, ctx: ctx, c: c, kubeconfig: cp.Kubeconfig, dir: dir}
	var b store.Bucket
	var err error
	switch *flagStore {
	case "file":
		root := filepath.Join(dir, "store")
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
		h.storeURL = "file://" + root
		b, err = store.Open(ctx, h.storeURL, nil)
	case "versitygw":
		srv := versitygw.Start(t)
		h.storeURL = srv.URL
		h.storeEnv = []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}
		b, err = srv.Open(ctx)
	default:
		t.Fatalf("-scale.store %q: want file or versitygw", *flagStore)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	h.logs = sessionlog.New(b)
	h.bin = os.Getenv("TURNLOG_BIN")
	if h.bin == "" {
		h.bin = filepath.Join(dir, "turnlog")
		build := exec.Command("go", "build", "-o", h.bin, "./cmd/turnlog")
		build.Dir = filepath.Join("..", "..")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build turnlog: %v\n%s", err, out)
		}
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	if *flagShards > 0 {
		h.shardSessions(cp.Config, *flagShards)
	}
	return h
}

// shardSessions applies config/shards, its list of shards made "0" to
// "shards-1", and waits until the API server gives new Sessions a shard.
func (h *harness) shardSessions(cfg *rest.Config, shards int) {
	h.t.Helper()
	dir := filepath.Join("..", "..", "config", "shards")
	if err := h.c.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "turnlog-system"}}); err != nil {
		h.t.Fatal(err)
	}
	if err := kubeapply.Apply(h.ctx, cfg, filepath.Join(dir, "shard_policy.yaml"), filepath.Join(dir, "shards.yaml")); err != nil {
		h.t.Fatalf("apply config/shards: %v", err)
	}
	names := make([]string, shards)
	for i := range names {
		names[i] = fmt.Sprint(i)
	}
	list := &corev1.ConfigMap{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: "turnlog-system", Name: "turnlog-shards"}, list); err != nil {
		h.t.Fatal(err)
	}
	list.Data["shards"] = strings.Join(names, " ")
	if err := h.c.Update(h.ctx, list); err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		probe := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "probe-"}}
		if err := h.c.Create(h.ctx, probe); err != nil {
			h.t.Fatal(err)
		}
		if err := h.c.Delete(h.ctx, probe); err != nil {
			h.t.Fatal(err)
		}
		if probe.Labels[turnlogv1.LabelShard] != "" {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatal("config/shards' policy gave no new Session a shard within a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// parallel runs fn(i) for i in [0, n) on 8 goroutines, failing the test on
// the first error.
func (h *harness) parallel(n int, fn func(i int) error) {
	h.t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		h.t.Fatal(err)
	}
}

// createSessions creates n Sessions, each with a log of 3 to 7 turns (22
// to 50 events) written as a host would: the earlier turns in one segment,
// the last turn in another. It returns the number of events written.
func (h *harness) createSessions(n int) int64 {
	began := time.Now()
	h.names = make([]string, n)
	h.heads = make([]int64, n)
	h.shards = make([]string, n)
	var events atomic.Int64
	h.parallel(n, func(i int) error {
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("s%05d", i)}}
		if err := h.c.Create(h.ctx, s); err != nil {
			return err
		}
		h.shards[i] = s.Labels[turnlogv1.LabelShard]
		if *flagShards > 0 && h.shards[i] == "" {
			return fmt.Errorf("the admission policy gave Session %s no shard", s.Name)
		}
		turns := 3 + i%5
		var first, last [][]byte
		first = append(first, []byte(`{"type":"session/start","adapter":`+adapter+`}`))
		for turn := 1; turn <= turns; turn++ {
			if turn < turns {
				first = append(first, turnEvents(turn)...)
			} else {
				last = turnEvents(turn)
			}
		}
		a := h.log(s).NewAppender("scale")
		for _, seg := range [][][]byte{first, last} {
			if _, err := a.Append(h.ctx, seg...); err != nil {
				return err
			}
		}
		h.names[i] = s.Name
		h.heads[i] = int64(len(first)+len(last)) - 1
		events.Add(int64(len(first) + len(last)))
		return nil
	})
	h.t.Logf("created %d Sessions with %d events in %.1fs", n, events.Load(), time.Since(began).Seconds())
	return events.Load()
}

const adapter = `{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}`

// turnEvents is one turn of a conversation: a question and a streamed
// answer with its replay state.
func turnEvents(turn int) [][]byte {
	e := func(format string, args ...any) []byte {
		return fmt.Appendf(nil, `{"turn":%d,`+format+`}`, append([]any{turn}, args...)...)
	}
	return [][]byte{
		e(`"type":"turn/start"`),
		e(`"type":"user/message","content":[{"type":"text","text":"question %d: what changed in the p99 latency?"}]`, turn),
		e(`"type":"response/start","response":0,"adapter":%s`, adapter),
		e(`"type":"chunk","response":0,"block":0,"delta":{"type":"text","text":"The rise starts with Tuesday's deploy, "}`),
		e(`"type":"chunk","response":0,"block":0,"delta":{"type":"text","text":"which halved the cache."}`),
		e(`"type":"response/finish","response":0,"stopReason":"stop","replayState":{"kind":"pi-ai","version":2,"response":{"id":"msg_%d","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"},"blocks":[{"type":"text","signature":null}]}`, turn),
		e(`"type":"turn/end","reason":"stop"`),
	}
}

func (h *harness) log(s *turnlogv1.Session) *sessionlog.Log {
	l, err := h.logs.Log(sessionlog.Location{Namespace: s.Namespace, Session: s.Name, UID: string(s.UID)})
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

// waitReady waits until every Session is Ready and current with its log.
func (h *harness) waitReady(n int, since time.Time) {
	h.t.Helper()
	for last := -1; ; {
		list := &turnlogv1.SessionList{}
		if err := h.c.List(h.ctx, list, client.InNamespace(namespace)); err != nil {
			h.t.Fatal(err)
		}
		ready := 0
		for i := range list.Items {
			s := &list.Items[i]
			c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady)
			if c != nil && c.Status == metav1.ConditionTrue && c.Reason == turnlogv1.ReasonCurrent && s.Status.ObservedGeneration == s.Generation {
				ready++
			}
		}
		if ready == n {
			return
		}
		if ready != last {
			h.t.Logf("%d of %d Sessions Ready after %.0fs", ready, n, time.Since(since).Seconds())
			last = ready
		}
		if time.Since(since) > 2*time.Hour {
			h.t.Fatalf("only %d of %d Sessions Ready after 2h", ready, n)
		}
		time.Sleep(2 * time.Second)
	}
}

// spread is k of the Sessions idx (indexes of names), spread over them
// from the offset-th on.
func spread(idx []int, k, offset int) []int {
	out := make([]int, 0, k)
	for j := range k {
		out = append(out, idx[(offset+j*(len(idx)/(2*k)+1))%len(idx)])
	}
	return out
}

// inShard is the indexes of the Sessions in shard; every Session's for
// "".
func (h *harness) inShard(shard string) []int {
	var out []int
	for i, s := range h.shards {
		if shard == "" || s == shard {
			out = append(out, i)
		}
	}
	return out
}

// appends appends a turn to each of the Sessions idx (indexes of names),
// each followed by a nudge if nudge is set, and returns how long each
// append took to reach the Session's status, sorted. Nudged appends are
// made one at a time, the others all at once.
func (h *harness) appends(idx []int, nudge bool, timeout time.Duration) []float64 {
	h.t.Helper()
	type probe struct {
		name  string
		began time.Time
		want  int64
		took  time.Duration
	}
	wait := func(probes []*probe) {
		deadline := time.Now().Add(timeout)
		for {
			left := 0
			for _, p := range probes {
				if p.took > 0 {
					continue
				}
				s := &turnlogv1.Session{}
				if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: namespace, Name: p.name}, s); err != nil {
					h.t.Fatal(err)
				}
				c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady)
				if s.Status.HeadSeq != nil && *s.Status.HeadSeq == p.want && c != nil && c.Reason == turnlogv1.ReasonCurrent {
					p.took = time.Since(p.began)
				} else {
					left++
				}
			}
			if left == 0 {
				return
			}
			if time.Now().After(deadline) {
				h.t.Fatalf("%d appends did not reach status within %s", left, timeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var probes []*probe
	for _, i := range idx {
		s := &turnlogv1.Session{}
		if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: namespace, Name: h.names[i]}, s); err != nil {
			h.t.Fatal(err)
		}
		events := turnEvents(int(s.Status.Turns) + 1)
		p := &probe{name: s.Name, began: time.Now(), want: h.heads[i] + int64(len(events))}
		if _, err := h.log(s).NewAppender("").Append(h.ctx, events...); err != nil {
			h.t.Fatal(err)
		}
		h.heads[i] = p.want
		probes = append(probes, p)
		if !nudge {
			continue
		}
		patch := client.MergeFrom(s.DeepCopy())
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[turnlogv1.AnnotationRequestedAt] = time.Now().UTC().Format(time.RFC3339Nano)
		if err := h.c.Patch(h.ctx, s, patch); err != nil {
			h.t.Fatal(err)
		}
		wait([]*probe{p})
	}
	wait(probes)
	out := make([]float64, 0, len(probes))
	for _, p := range probes {
		out = append(out, float64(p.took.Microseconds())/1000)
	}
	slices.Sort(out)
	return out
}

// snapshot is what the API server holds about the Sessions: each one's
// resourceVersion, and the number of Events in the namespace.
type snapshot struct {
	versions map[string]string
	events   int
}

func (h *harness) snapshot() snapshot {
	h.t.Helper()
	list := &turnlogv1.SessionList{}
	if err := h.c.List(h.ctx, list, client.InNamespace(namespace)); err != nil {
		h.t.Fatal(err)
	}
	s := snapshot{versions: map[string]string{}}
	for _, item := range list.Items {
		s.versions[item.Name] = item.ResourceVersion
	}
	events := &eventsv1.EventList{}
	if err := h.c.List(h.ctx, events, client.InNamespace(namespace)); err != nil {
		h.t.Fatal(err)
	}
	s.events = len(events.Items)
	return s
}

// written is the number of Sessions written between two snapshots.
func written(before, after snapshot) int64 {
	n := int64(0)
	for name, rv := range after.versions {
		if before.versions[name] != rv {
			n++
		}
	}
	return n
}

// managerProc is a running `turnlog manager`.
type managerProc struct {
	t *testing.T
	// shard is the shard it reconciles; "" for every Session.
	shard   string
	cmd     *exec.Cmd
	metrics string
	done    chan struct{}
}

// managers starts a manager for each shard, or one for every Session in
// an unsharded run.
func (h *harness) managers(name string) []*managerProc {
	if *flagShards == 0 {
		return []*managerProc{h.manager(name, "")}
	}
	var ms []*managerProc
	for i := range *flagShards {
		ms = append(ms, h.manager(name, fmt.Sprint(i)))
	}
	return ms
}

// scrapeAll scrapes each manager.
func scrapeAll(ms []*managerProc) []metricsText {
	out := make([]metricsText, len(ms))
	for i, m := range ms {
		out[i] = m.scrape()
	}
	return out
}

// manager starts `turnlog manager` in local worker mode on the harness's
// cluster and store, for shard's Sessions (every one for ""), logging to
// <dir>/<name>[-<shard>].log.
func (h *harness) manager(name, shard string) *managerProc {
	h.t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	args := append([]string{"manager", "--kubeconfig=" + h.kubeconfig, "--worker-mode=local", "--store-url=" + h.storeURL,
		"--metrics-bind-address=" + addr, "--metrics-secure=false", "--health-probe-bind-address=0"}, strings.Fields(*flagArgs)...)
	if shard != "" {
		args = append(args, "--shard="+shard)
		name += "-" + shard
	}
	out, err := os.Create(filepath.Join(h.dir, name+".log"))
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := exec.Command(h.bin, args...)
	cmd.Env = append(os.Environ(), h.storeEnv...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	m := &managerProc{t: h.t, shard: shard, cmd: cmd, metrics: "http://" + addr + "/metrics", done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(m.done)
	}()
	h.t.Cleanup(m.stop)
	return m
}

// scrape reads the metrics endpoint, waiting for it to come up.
func (m *managerProc) scrape() metricsText {
	m.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-m.done:
			m.t.Fatalf("the manager exited: %v", m.cmd.ProcessState)
		default:
		}
		resp, err := http.Get(m.metrics)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				return parseMetrics(string(body))
			}
			err = fmt.Errorf("%s: %v", resp.Status, rerr)
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("scrape %s: %v", m.metrics, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rss is the manager's resident memory now and at its peak, in MiB, from
// /proc/PID/status.
func (m *managerProc) rss() (now, peak float64) {
	m.t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		m.t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			now = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return now, peak
}

// stop stops the manager as Kubernetes would: SIGTERM, then SIGKILL.
func (m *managerProc) stop() {
	select {
	case <-m.done:
		return
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

func parseMetrics(text string) metricsText {
	m := metricsText{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// metricsText is one scrape of the manager's metrics endpoint: series
// (name and labels, as printed) to value.
type metricsText map[string]float64

// sum is the scrapes of several managers as one: each series' values
// added up.
func sum(scrapes []metricsText) metricsText {
	out := metricsText{}
	for _, m := range scrapes {
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

func (m metricsText) has(name, label string) bool {
	for k := range m {
		if series(k, name) && strings.Contains(k, label) {
			return true
		}
	}
	return false
}

// sum adds the series of name whose labels contain every filter.
func (m metricsText) sum(name string, filters ...string) float64 {
	total := 0.0
	for k, v := range m {
		if !series(k, name) {
			continue
		}
		ok := true
		for _, f := range filters {
			ok = ok && strings.Contains(k, f)
		}
		if ok {
			total += v
		}
	}
	return total
}

// byLabel sums the series of name by the value of one label.
func (m metricsText) byLabel(name, label string) map[string]int64 {
	out := map[string]int64{}
	for k, v := range m {
		if !series(k, name) {
			continue
		}
		_, rest, ok := strings.Cut(k, label+`="`)
		if !ok {
			continue
		}
		value, _, _ := strings.Cut(rest, `"`)
		out[value] += int64(v)
	}
	return out
}

func series(key, name string) bool {
	return key == name || strings.HasPrefix(key, name+"{")
}

func diff(after, before map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func scaled(m map[string]int64, f float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = float64(v) * f
	}
	return out
}
