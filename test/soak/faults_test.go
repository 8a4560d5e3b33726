package soak

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The kinds of fault the soak injects.
const (
	faultAPIServer   = "apiserver-restarted"
	faultManagerKill = "manager-sigkill"
	faultStoreKill   = "store-killed"
	faultStoreSlow   = "store-slow-and-dropping"
	faultWorkerPods  = "worker-pods-deleted"
	faultWorkerKill  = "worker-pod-killed-mid-run"
	faultHostKill    = "host-sigkill"
	faultSecondStore = "second-store-down"
)

var faultKinds = []string{faultAPIServer, faultManagerKill, faultStoreKill, faultStoreSlow, faultWorkerPods, faultWorkerKill, faultHostKill, faultSecondStore}

// secondStoreOutage is how long second-store-down keeps the second store's
// server dead: minutes in a long soak (3 × -soak.fault-every, 2m15s for
// `make soak`), 24 s in the short one, and never over 3 minutes, well
// inside the 10 minutes a host retries a flush for.
func secondStoreOutage() time.Duration {
	return min(3**flagFaultEvery, 3*time.Minute)
}

// faultWindow is one fault, from its start until it was over.
type faultWindow struct {
	kind       string
	start, end time.Time
}

// faultLog records each fault with its times, as a TSV a reader can line
// up with the manager's log.
type faultLog struct {
	t   *testing.T
	mu  sync.Mutex
	f   *os.File
	n   map[string]int
	end time.Time
	// minutes has each fault's start in minutes since began, the time
	// axis of rss.tsv, for the plot (`make soak-plot`).
	minutes *os.File
	began   time.Time
	windows []faultWindow
}

func newFaultLog(t *testing.T, dir string, began time.Time) *faultLog {
	f, err := os.Create(filepath.Join(dir, "faults.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	minutes, err := os.Create(filepath.Join(dir, "faults-minutes.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { minutes.Close() })
	fmt.Fprintln(f, "start\tend\tfault\tdetail")
	fmt.Fprintln(minutes, "minute\tfault")
	l := &faultLog{t: t, f: f, n: map[string]int{}, minutes: minutes, began: began}
	for _, k := range faultKinds {
		l.n[k] = 0
	}
	return l
}

func (l *faultLog) record(kind string, start time.Time, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	end := time.Now()
	l.n[kind]++
	l.end = end
	l.windows = append(l.windows, faultWindow{kind: kind, start: start, end: end})
	detail = strings.Join(strings.Fields(detail), " ")
	fmt.Fprintf(l.f, "%s\t%s\t%s\t%s\n", start.UTC().Format(time.RFC3339Nano), end.UTC().Format(time.RFC3339Nano), kind, detail)
	fmt.Fprintf(l.minutes, "%.2f\t%s\n", start.Sub(l.began).Minutes(), kind)
	l.t.Logf("fault %s (%s): %s", kind, end.Sub(start).Round(time.Millisecond), detail)
}

func (l *faultLog) counts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, v := range l.n {
		out[k] = v
	}
	return out
}

// all is every fault so far, in the order they ended.
func (l *faultLog) all() []faultWindow {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.windows)
}

// last is when the last fault ended.
func (l *faultLog) last() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end
}

// injectFaults injects faults for d: every kind once in each round, in a
// random order, at random intervals around -soak.fault-every. The first
// round is always completed, even past d, so a short run has every kind.
// The channel closes when the last fault is over.
func (r *run) injectFaults(d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		end := time.Now().Add(d)
		rng := rand.New(rand.NewPCG(2, uint64(time.Now().UnixNano())))
		for round := 0; ; round++ {
			for _, kind := range shuffled(rng, faultKinds) {
				wait := *flagFaultEvery/2 + time.Duration(rng.Int64N(int64(*flagFaultEvery)))
				if round > 0 && time.Now().Add(wait).After(end) {
					time.Sleep(time.Until(end))
					return
				}
				select {
				case <-r.ctx.Done():
					return
				case <-time.After(wait):
				}
				r.inject(rng, kind)
			}
			if time.Now().After(end) {
				return
			}
		}
	}()
	return done
}

func shuffled(rng *rand.Rand, in []string) []string {
	out := append([]string(nil), in...)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func (r *run) inject(rng *rand.Rand, kind string) {
	r.faulting.Lock()
	defer r.faulting.Unlock()
	start := time.Now()
	var detail string
	switch kind {
	case faultAPIServer:
		err := r.cluster.RestartAPIServer(r.ctx, 3*time.Second)
		detail = fmt.Sprintf("kube-apiserver SIGKILLed, started again after 3s and ready (error: %v)", err)
		if err != nil {
			r.t.Errorf("restarting kube-apiserver: %v", err)
		}
	case faultManagerKill:
		pid := r.manager.pid()
		r.manager.kill()
		time.Sleep(2 * time.Second)
		err := r.manager.start()
		detail = fmt.Sprintf("pid %d SIGKILLed, new manager pid %d after 2s (start error: %v)", pid, r.manager.pid(), err)
	case faultStoreKill:
		r.gw.Kill()
		cut := r.proxy.cut()
		time.Sleep(5 * time.Second)
		err := r.gw.Restart()
		detail = fmt.Sprintf("versitygw SIGKILLed (%d connections cut), restarted after 5s (error: %v)", cut, err)
		if err != nil {
			r.t.Errorf("restarting versitygw: %v", err)
		}
	case faultStoreSlow:
		r.proxy.latency.Store(int64(300 * time.Millisecond))
		r.proxy.drop.Store(200)
		cut := r.proxy.cut()
		time.Sleep(15 * time.Second)
		r.proxy.latency.Store(0)
		r.proxy.drop.Store(0)
		detail = fmt.Sprintf("15s of 300ms per chunk sent and 20%% of new connections dropped; %d open connections cut", cut)
	case faultWorkerPods:
		out, err := r.kubectl("delete", "pods", "-n", ns, "-l", "app.kubernetes.io/component=worker", "--wait=false")
		detail = fmt.Sprintf("kubectl delete pods: %s %v", out, errString(err))
	case faultWorkerKill:
		// No grace: the pod's process dies with its runs, whose leases
		// the manager must notice are gone and give to another pod.
		out, err := r.kubectl("delete", "pods", "-n", ns, "-l", "app.kubernetes.io/component=worker", "--grace-period=0", "--force", "--wait=false")
		detail = fmt.Sprintf("kubectl delete pods --grace-period=0 --force: %s %v", out, errString(err))
	case faultHostKill:
		h := r.hosts[rng.IntN(len(r.hosts))]
		h.kill()
		time.Sleep(time.Second)
		err := h.start()
		detail = fmt.Sprintf("%s (store %s) SIGKILLed while streaming, restarted on the same Sessions after 1s (error: %v)", h.name, h.store, err)
	case faultSecondStore:
		// The second store's server dies and stays dead for minutes;
		// its hosts retry their flushes, the manager's breaker for it
		// opens, and the default store's Sessions go on (the probe,
		// probeDefaultStore, measures them meanwhile).
		d := secondStoreOutage()
		r.gw2.Kill()
		select {
		case <-r.ctx.Done():
		case <-time.After(d):
		}
		err := r.gw2.Restart()
		detail = fmt.Sprintf("versitygw of store %q (%s) SIGKILLed, down %s, restarted on the same port and data (error: %v)",
			secondStore, strings.Join(r.secondSessions, ","), d, err)
		if err != nil {
			r.t.Errorf("restarting the second store's versitygw: %v", err)
		}
	}
	r.faults.record(kind, start, detail)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
