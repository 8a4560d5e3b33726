package soak

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// export returns a Session's log as `turnlog export` writes it, read from
// its store directly rather than through the fault proxy.
func (r *run) export(namespace, name string) ([]byte, error) {
	url, err := r.directStoreURL(namespace, name)
	if err != nil {
		return nil, err
	}
	return r.turnlogCmd(nil, "export", "-n", namespace, "--session", name, "--store-url", url)
}

// directStoreURL is the URL the checker reads Session namespace/name's
// store through: the first store's gateway itself, or the second store,
// as its spec.storage.store says (a fork's child is in its source's).
func (r *run) directStoreURL(namespace, name string) (string, error) {
	key := namespace + "/" + name
	if url, ok := r.storeOf.Load(key); ok {
		return url.(string), nil
	}
	var s turnlogv1.Session
	if err := r.c.Get(r.ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s); err != nil {
		return "", fmt.Errorf("the store of Session %s: %w", key, err)
	}
	url := r.directURL
	switch store := s.Spec.Storage.StoreName(); store {
	case turnlogv1.DefaultStore:
	case secondStore:
		url = r.secondURL
	default:
		return "", fmt.Errorf("Session %s names store %q, which the soak does not configure", key, store)
	}
	r.storeOf.Store(key, url)
	return url, nil
}

// canonical is an event's JSON without its seq, with sorted keys: the same
// for the event a host added and the line the log stores.
func canonical(data []byte) (string, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return "", err
	}
	delete(m, "seq")
	out, err := json.Marshal(m)
	return string(out), err
}

// checkAcks compares each soak Session's log with what its hosts had
// acknowledged: every acknowledged event at its seq and nowhere else, and
// `turnlog validate` clean. It returns the counts of lost and duplicated
// events and of logs that do not validate.
func (r *run) checkAcks(final bool) (lost, dup, invalid int) {
	lost, dup, invalid, _ = r.checkAcksCounting(final)
	return
}

// exportBetweenFaults exports one of the soak's Sessions. During the run
// (not final) a fault waits for the export and the export for a fault: one
// Session at a time, so that faults go on between the Sessions of a check.
// Holding them off for a whole check, which exports every Session and takes
// a quarter of an hour on a loaded machine, left an hour with a third of
// its faults.
func (r *run) exportBetweenFaults(name string, final bool) ([]byte, error) {
	if !final {
		r.faulting.Lock()
		defer r.faulting.Unlock()
	}
	return r.export(ns, name)
}

func (r *run) checkAcksCounting(final bool) (lost, dup, invalid int, acked int64) {
	for i := range *flagSessions {
		name := fmt.Sprintf("chat-%03d", i)
		// The acknowledgements first: an event acknowledged before the
		// export began must be in it.
		acks, err := readAcks(filepath.Join(r.dir, "acks", name+".ack"))
		if err != nil {
			r.t.Errorf("%s: no acknowledgements: %v", name, err)
			continue
		}
		log, err := r.exportBetweenFaults(name, final)
		if err != nil {
			r.t.Errorf("%s: %v", name, err)
			invalid++
			continue
		}
		if out, err := r.turnlogCmd(log, "validate", "-"); err != nil {
			r.t.Errorf("turnlog validate %s: %v\n%s", name, err, out)
			invalid++
		}
		var lines []string
		count := map[string]int{}
		for line := range bytes.Lines(log) {
			c, err := canonical(line)
			if err != nil {
				r.t.Errorf("%s: line %d: %v", name, len(lines), err)
			}
			lines = append(lines, c)
			count[c]++
		}
		ackCount := map[string]int{}
		for _, a := range acks {
			acked++
			c, _ := canonical(a.Event)
			ackCount[c]++
			if a.Seq >= int64(len(lines)) || lines[a.Seq] != c {
				lost++
				if lost <= 5 {
					r.t.Logf("%s: acknowledged event at seq %d is not in the log there: %s", name, a.Seq, c)
				}
			}
		}
		for c, n := range ackCount {
			if count[c] > n {
				dup += count[c] - n
				r.t.Logf("%s: acknowledged event %d times in the log: %s", name, count[c], c)
			}
		}
	}
	return lost, dup, invalid, acked
}

type ack struct {
	Seq   int64           `json:"seq"`
	Event json.RawMessage `json:"event"`
}

// readAcks reads a Session's acknowledgement records.
func readAcks(path string) ([]ack, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []ack
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var a ack
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			// A host killed while it wrote its record leaves a torn
			// last line: that event was not recorded.
			continue
		}
		out = append(out, a)
	}
	return out, sc.Err()
}

// waitSettled waits until every Session of the run is Ready and Current
// and every SessionFork has ended, and returns how long that took after
// the last fault. A backlog that keeps shrinking is a machine that is slow,
// not a fault: what fails the soak is one that stops shrinking, no object
// settling for -soak.settle (a Session stuck in WorkPending, a fork never
// copied). The time is recorded either way, for the results table.
func (r *run) waitSettled(lastFault time.Time) time.Duration {
	var pending []string
	lastProgress := time.Now()
	for {
		now := r.unsettled()
		if len(now) == 0 {
			return time.Since(lastFault)
		}
		if settledSince(pending, now) {
			lastProgress = time.Now()
		}
		pending = now
		if stalled := time.Since(lastProgress); stalled > *flagSettle {
			r.t.Errorf("%d objects not settled %s after the last fault, none settling for %s (-soak.settle): %s",
				len(pending), time.Since(lastFault).Round(time.Second), stalled.Round(time.Second), strings.Join(pending[:min(10, len(pending))], "; "))
			r.recordStall()
			return time.Since(lastFault)
		}
		time.Sleep(2 * time.Second)
	}
}

// recordStall writes what the worker pods were doing when the
// backlog stopped shrinking into stalled.txt, next to the other records:
// the cluster is gone once the test ends, and a stall is rare enough that
// its one occurrence must be enough to explain it.
func (r *run) recordStall() {
	var b strings.Builder
	for _, args := range [][]string{
		{"get", "sessions,sessionforks", "-A", "-o", "wide"},
		{"get", "deployments,pods", "-A", "-l", "app.kubernetes.io/component=worker", "-o", "wide"},
		{"describe", "pods", "-A", "-l", "app.kubernetes.io/component=worker"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
	} {
		out, err := r.kubectl(args...)
		fmt.Fprintf(&b, "$ kubectl %s\n%s%s\n", strings.Join(args, " "), out, errString(err))
	}
	path := filepath.Join(r.dir, "stalled.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		r.t.Logf("recording the stall: %v", err)
		return
	}
	r.t.Logf("the worker pods at the stall: %s", path)
}

// settledSince reports whether an object of before is no longer in now.
func settledSince(before, now []string) bool {
	still := make(map[string]bool, len(now))
	for _, o := range now {
		still[objectName(o)] = true
	}
	for _, o := range before {
		if !still[objectName(o)] {
			return true
		}
	}
	return false
}

// objectName is the "Session ns/name" of an unsettled entry, without the
// condition that follows it.
func objectName(entry string) string {
	name, _, _ := strings.Cut(entry, ":")
	return name
}

func (r *run) unsettled() []string {
	var out []string
	for _, n := range []string{ns, quietNS, floodNS} {
		var sessions turnlogv1.SessionList
		if err := r.c.List(r.ctx, &sessions, client.InNamespace(n)); err != nil {
			return []string{err.Error()}
		}
		for _, s := range sessions.Items {
			c := apimeta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady)
			if c == nil || c.Status != "True" || c.Reason != turnlogv1.ReasonCurrent {
				out = append(out, fmt.Sprintf("Session %s/%s: %v", n, s.Name, c))
			}
		}
		var forks turnlogv1.SessionForkList
		if err := r.c.List(r.ctx, &forks, client.InNamespace(n)); err != nil {
			return []string{err.Error()}
		}
		for _, f := range forks.Items {
			c := apimeta.FindStatusCondition(f.Status.Conditions, turnlogv1.ConditionSucceeded)
			if c == nil || c.Status == "Unknown" {
				out = append(out, fmt.Sprintf("SessionFork %s/%s: %v", n, f.Name, c))
			}
		}
	}
	return out
}

// check runs the final checks once everything settled.
func (r *run) check() result {
	var res result
	res.Lost, res.Duplicated, res.Invalid, res.Events = r.checkAcksCounting(true)
	exports := &exportCache{r: r}
	res.CaughtUpByPoll = r.waitHeadsCaughtUp(exports)

	// Every Session's stored transcript is an offline replay of its log
	// through the same seq, and its status head is the log's.
	var mu sync.Mutex
	for _, n := range []string{ns, quietNS} {
		var sessions turnlogv1.SessionList
		if err := r.c.List(r.ctx, &sessions, client.InNamespace(n)); err != nil {
			r.t.Fatal(err)
		}
		inParallel(sessions.Items, func(s turnlogv1.Session) {
			if why := r.transcriptMismatch(n, s.Name, exports.get(n, s.Name), s.Status.HeadSeq); why != "" {
				mu.Lock()
				res.Mismatches = append(res.Mismatches, fmt.Sprintf("%s/%s: %s", n, s.Name, why))
				mu.Unlock()
			}
		})
	}
	slices.Sort(res.Mismatches)

	// Every SessionFork has one child, whose log is the source's prefix
	// through the first turn/end at or after the floored atSeq.
	for _, n := range []string{ns, floodNS} {
		var forks turnlogv1.SessionForkList
		if err := r.c.List(r.ctx, &forks, client.InNamespace(n)); err != nil {
			r.t.Fatal(err)
		}
		inParallel(forks.Items, func(f turnlogv1.SessionFork) {
			msg := r.forkAnomaly(n, &f, exports.get)
			mu.Lock()
			defer mu.Unlock()
			res.Forks++
			if msg != "" {
				res.ForkAnomalies++
				r.t.Logf("fork anomaly: %s/%s: %s", n, f.Name, msg)
			}
		})
	}
	res.EventReasons = r.checkEvents(res.Forks)
	return res
}

// checkWorkers is how many Sessions the end-of-run checks read at once:
// each read is a few turnlog processes, and one at a time took most of an
// hour for the 550 Sessions an hour's run leaves.
const checkWorkers = 4

// inParallel calls check on every item, checkWorkers at a time.
func inParallel[T any](items []T, check func(T)) {
	var g errgroup.Group
	g.SetLimit(checkWorkers)
	for _, item := range items {
		g.Go(func() error {
			check(item)
			return nil
		})
	}
	_ = g.Wait()
}

// exportCache holds each Session's export once the end-of-run checks have
// read it: they read a log for its head, its transcript and each fork of
// it, and it no longer changes.
type exportCache struct {
	r *run
	m sync.Map // namespace/name -> []byte
}

// get returns Session n/name's export, reporting a failed export as the
// test's error and returning nil.
func (c *exportCache) get(n, name string) []byte {
	key := n + "/" + name
	if b, ok := c.m.Load(key); ok {
		return b.([]byte)
	}
	b, err := c.r.export(n, name)
	if err != nil {
		c.r.t.Errorf("export %s: %v", key, err)
	}
	c.m.Store(key, b)
	return b
}

// maxPoll is the manager's --max-poll-interval in the soak.
const maxPoll = time.Minute

// waitHeadsCaughtUp waits until every Session's status.headSeq is its
// log's head, and returns the Sessions that were behind. Settled means
// Ready and Current, but an append whose nudge was lost (its host killed
// between the append and the nudge, the API server down when it nudged)
// is only found by the Session's poll, within --max-poll-interval, as
// docs/controllers.md promises; a Session still behind after that is a
// mismatch for the check below to report. All of them wait together.
func (r *run) waitHeadsCaughtUp(exports *exportCache) []string {
	type lagging struct {
		key  client.ObjectKey
		head int64
	}
	var (
		mu     sync.Mutex
		behind []lagging
		report []string
	)
	for _, n := range []string{ns, quietNS} {
		var sessions turnlogv1.SessionList
		if err := r.c.List(r.ctx, &sessions, client.InNamespace(n)); err != nil {
			r.t.Fatal(err)
		}
		inParallel(sessions.Items, func(s turnlogv1.Session) {
			log := exports.get(n, s.Name)
			if log == nil {
				return // reported by the export
			}
			head := int64(bytes.Count(log, []byte("\n")) - 1)
			if caughtUp(&s, head) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			behind = append(behind, lagging{client.ObjectKeyFromObject(&s), head})
			report = append(report, fmt.Sprintf("%s/%s (status.headSeq %s, log head %d)", n, s.Name, ptrString(s.Status.HeadSeq), head))
		})
	}
	for deadline := time.Now().Add(maxPoll + 30*time.Second); len(behind) > 0 && time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		behind = slices.DeleteFunc(behind, func(l lagging) bool {
			var now turnlogv1.Session
			return r.c.Get(r.ctx, l.key, &now) == nil && caughtUp(&now, l.head)
		})
	}
	if len(report) > 0 {
		slices.Sort(report)
		r.t.Logf("Sessions behind their log once settled, left to their poll: %s", strings.Join(report, "; "))
	}
	return report
}

// caughtUp says whether Session s's status has reached its log's head and
// is Current.
func caughtUp(s *turnlogv1.Session, head int64) bool {
	c := apimeta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady)
	return s.Status.HeadSeq != nil && *s.Status.HeadSeq == head && c != nil && c.Reason == turnlogv1.ReasonCurrent
}

// transcriptMismatch says how the stored transcript of Session n/name
// differs from an offline replay of its exported log, or "".
func (r *run) transcriptMismatch(n, name string, log []byte, headSeq *int64) string {
	lines := bytes.Count(log, []byte("\n"))
	if headSeq == nil || *headSeq != int64(lines-1) {
		return fmt.Sprintf("status.headSeq %v, the log has %d events", ptrString(headSeq), lines)
	}
	url, err := r.directStoreURL(n, name)
	if err != nil {
		return err.Error()
	}
	stored, err := r.turnlogCmd(nil, "transcript", "-n", n, "--session", name, "--store-url", url)
	if err != nil {
		if !bytes.Contains(log, []byte(`"type":"turn/end"`)) {
			return "" // nothing to replay yet
		}
		return err.Error()
	}
	var tr struct {
		ThroughSeq int64 `json:"throughSeq"`
	}
	if err := json.Unmarshal(stored, &tr); err != nil {
		return fmt.Sprintf("transcript: %v", err)
	}
	offline, err := r.turnlogCmd(log, "replay", "--through", strconv.FormatInt(tr.ThroughSeq, 10), "-")
	if err != nil {
		return err.Error()
	}
	if !bytes.Equal(stored, offline) {
		at := 0
		for at < min(len(stored), len(offline)) && stored[at] == offline[at] {
			at++
		}
		from := max(at-300, 0)
		return fmt.Sprintf("the stored transcript (through %d, %d bytes) differs from turnlog replay of the export (%d bytes) at byte %d:\nstored:  %.600s\noffline: %.600s", tr.ThroughSeq, len(stored), len(offline), at, stored[from:], offline[from:])
	}
	// Settled means replayed through the log's last turn/end (and the
	// context events after it, if any).
	if last := bytes.LastIndex(log, []byte(`"type":"turn/end"`)); last >= 0 {
		lastEnd := int64(bytes.Count(log[:last], []byte("\n")))
		if tr.ThroughSeq < lastEnd {
			return fmt.Sprintf("replayed through %d, the last turn/end is %d", tr.ThroughSeq, lastEnd)
		}
	}
	return ""
}

func ptrString(p *int64) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(*p, 10)
}

func (r *run) forkAnomaly(n string, f *turnlogv1.SessionFork, exportOf func(string, string) []byte) string {
	c := apimeta.FindStatusCondition(f.Status.Conditions, turnlogv1.ConditionSucceeded)
	if c == nil || c.Status != "True" {
		return fmt.Sprintf("Succeeded %v", c)
	}
	var children turnlogv1.SessionList
	if err := r.c.List(r.ctx, &children, client.InNamespace(n), client.MatchingLabels{turnlogv1.LabelFork: f.Name}); err != nil {
		return err.Error()
	}
	if len(children.Items) != 1 {
		return fmt.Sprintf("%d children", len(children.Items))
	}
	if f.Status.CutSeq == nil {
		return "no cutSeq"
	}
	src := exportOf(n, f.Spec.Source.Name)
	at, _, _ := strings.Cut(f.Spec.AtSeq, ".")
	floor, _ := strconv.ParseInt(at, 10, 64)
	want := int64(-1)
	var prefix []byte
	seq := int64(0)
	for line := range bytes.Lines(src) {
		prefix = append(prefix, line...)
		if seq >= floor && bytes.Contains(line, []byte(`"type":"turn/end"`)) {
			want = seq
			break
		}
		seq++
	}
	if want != *f.Status.CutSeq {
		return fmt.Sprintf("atSeq %s cut at %d, the first turn/end at or after %d is %d", f.Spec.AtSeq, *f.Status.CutSeq, floor, want)
	}
	child := children.Items[0].Name
	got := exportOf(n, child)
	if !bytes.Equal(got, prefix) {
		return fmt.Sprintf("child %s's log (%d bytes) is not the source's first %d events (%d bytes)", child, len(got), want+1, len(prefix))
	}
	return ""
}

// Events no fault of this run explains: each says data was lost, refused
// or degraded, or work given up on.
var forbiddenReasons = []string{"ForkFailed", "WorkerFailedPermanently", "CheckpointRejected", "EnvelopeDiscarded", "LogOrphaned", "ObjectRefused", "ReplayDegraded"}

// checkEvents counts the run's Events by reason and fails on those no
// fault explains and on more than the run's faults can explain.
func (r *run) checkEvents(forks int) map[string]int {
	reasons := map[string]int{}
	forkedOf := map[string][]string{}
	for _, n := range []string{ns, quietNS, floodNS} {
		var events corev1.EventList
		if err := r.c.List(r.ctx, &events, client.InNamespace(n)); err != nil {
			r.t.Errorf("listing Events: %v", err)
			return nil
		}
		for _, e := range events.Items {
			count := max(int(e.Count), 1)
			if e.Series != nil {
				count = max(count, int(e.Series.Count))
			}
			reasons[e.Reason] += count
			if slices.Contains(forbiddenReasons, e.Reason) {
				r.t.Logf("%s Event on %s %s/%s: %s", e.Reason, e.InvolvedObject.Kind, n, e.InvolvedObject.Name, e.Message)
			}
			if e.Reason == "Forked" {
				key := n + "/" + e.InvolvedObject.Name
				forkedOf[key] = append(forkedOf[key], fmt.Sprintf("%dx at %s: %s", count, e.EventTime.UTC().Format(time.RFC3339Nano), e.Message))
			}
		}
	}
	for _, reason := range forbiddenReasons {
		if reasons[reason] > 0 {
			r.t.Errorf("%d %s Events", reasons[reason], reason)
		}
	}
	faults := r.faults.counts()
	if n := faults[faultManagerKill]; reasons["Forked"] > forks+n {
		r.t.Errorf("%d Forked Events for %d SessionForks and %d manager kills", reasons["Forked"], forks, n)
	}
	for fork, events := range forkedOf {
		if len(events) > 1 || !strings.HasPrefix(events[0], "1x") {
			r.t.Logf("SessionFork %s: Forked %s", fork, strings.Join(events, "; "))
		}
	}
	// A failed worker attempt is one Event; each worker, store or manager
	// fault can fail at most a few attempts of each Session.
	disrupt := faults[faultAPIServer] + faults[faultWorkerPods] + faults[faultWorkerKill] + faults[faultStoreKill] + faults[faultStoreSlow] + faults[faultManagerKill] + faults[faultSecondStore]
	if bound := 3 * (*flagSessions + forks) * (disrupt + 1); reasons["WorkerFailed"] > bound {
		r.t.Errorf("%d WorkerFailed Events, over %d", reasons["WorkerFailed"], bound)
	}
	return reasons
}
