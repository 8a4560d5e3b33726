package scale

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

var (
	flagFlood      = flag.String("flood.rows", "", "comma-separated floods to measure from one namespace while another appends: quiet, nudges, slow, forks, delete (delete needs forks before it); empty: measure nothing")
	flagFloodOut   = flag.String("flood.out", "", "append each row as a JSON line to this file")
	flagFloodProbe = flag.Int("flood.appends", 20, "appends of the quiet namespace measured per row")
	flagFloodMem   = flag.String("flood.memory-limit", "256Mi", "the manager's container memory limit, as the Deployment passes it (TURNLOG_MEMORY_LIMIT)")
	// Sizes of the floods, as in the measurements of docs/benchmarks.md.
	flagNudged     = flag.Int("flood.nudged", 300, "Sessions the nudges row nudges every second")
	flagSlow       = flag.Int("flood.slow", 4, "Sessions of the slow row")
	flagSlowEvents = flag.Int("flood.slow-events", 1_000_000, "events in the one segment of each slow Session")
	flagForks      = flag.Int("flood.forks", 200, "SessionForks of the forks row")
	flagForkTurns  = flag.Int("flood.fork-turns", 20_000, "turns of the forked Session's log")
)

// FloodRow is what one flood measured.
type FloodRow struct {
	Flood string `json:"flood"`
	Args  string `json:"managerArgs"`
	// The quiet namespace's append -> status.headSeq, in seconds.
	MedianSeconds float64 `json:"medianSeconds"`
	MaxSeconds    float64 `json:"maxSeconds"`
	// The quiet namespace's append -> Current (assembled and replayed
	// through the new head: the transcript a host resumes from), in
	// seconds.
	CurrentMedianSeconds float64 `json:"currentMedianSeconds"`
	CurrentMaxSeconds    float64 `json:"currentMaxSeconds"`
	// The manager over the row: CPU (share of one core), peak RSS.
	CPU        float64 `json:"cpu"`
	PeakRSSMiB float64 `json:"peakRssMiB"`
}

// TestFlood measures how one namespace's flood delays another namespace's
// appends, and the manager's CPU and memory meanwhile: the figures of
// docs/benchmarks.md ("One namespace floods, another appends"). Each row
// starts its flood, measures -flood.appends appends of the quiet namespace
// one at a time (each nudged, as hosts do), and stops the flood.
func TestFlood(t *testing.T) {
	if *flagFlood == "" {
		t.Skip("no -flood.rows: run `make bench-flood`")
	}
	t.Setenv("TURNLOG_MEMORY_LIMIT", *flagFloodMem)
	h := start(t)
	for _, ns := range []string{"team-a", "team-b"} {
		if err := h.c.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	m := h.manager("flood", "")
	m.scrape()
	quiet := h.floodSession("team-b", "quiet", [][][]byte{append([][]byte{startEvent()}, turnEvents(1)...)})
	h.waitCurrent("team-b", quiet.Name, 2*time.Minute)
	turn := 1
	for _, row := range strings.Split(*flagFlood, ",") {
		row = strings.TrimSpace(row)
		stopFlood := h.flood(row)
		m.resetPeak()
		cpu0, t0 := m.cpuSeconds(), time.Now()
		var waits, currents []float64
		for range *flagFloodProbe {
			turn++
			toHead, toCurrent := h.quietAppend(quiet, turn)
			waits, currents = append(waits, toHead), append(currents, toCurrent)
			time.Sleep(300 * time.Millisecond)
		}
		cpu := (m.cpuSeconds() - cpu0) / time.Since(t0).Seconds()
		_, peak := m.rss()
		stopFlood()
		slices.Sort(waits)
		slices.Sort(currents)
		res := FloodRow{Flood: row, Args: *flagArgs, MedianSeconds: waits[len(waits)/2], MaxSeconds: waits[len(waits)-1],
			CurrentMedianSeconds: currents[len(currents)/2], CurrentMaxSeconds: currents[len(currents)-1], CPU: cpu, PeakRSSMiB: peak}
		line, _ := json.Marshal(res)
		t.Logf("result: %s", line)
		if *flagFloodOut != "" {
			f, err := os.OpenFile(*flagFloodOut, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(f, "%s\n", line)
			f.Close()
		}
	}
}

func startEvent() []byte { return []byte(`{"type":"session/start","adapter":` + adapter + `}`) }

// floodSession creates a Session in ns with its log written in segments.
func (h *harness) floodSession(ns, name string, segments [][][]byte) *turnlogv1.Session {
	h.t.Helper()
	s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := h.c.Create(h.ctx, s); err != nil {
		h.t.Fatal(err)
	}
	a := h.log(s).NewAppender("flood")
	for _, seg := range segments {
		if _, err := a.Append(h.ctx, seg...); err != nil {
			h.t.Fatal(err)
		}
	}
	h.nudge(s)
	return s
}

func (h *harness) nudge(s *turnlogv1.Session) {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, turnlogv1.AnnotationRequestedAt, time.Now().UTC().Format(time.RFC3339Nano))
	_ = h.c.Patch(h.ctx, s, client.RawPatch("application/merge-patch+json", []byte(patch)))
}

// waitCurrent waits for a Session to be Ready and Current.
func (h *harness) waitCurrent(ns, name string, timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := &turnlogv1.Session{}
		if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			h.t.Fatal(err)
		}
		for _, c := range s.Status.Conditions {
			if c.Type == turnlogv1.ConditionReady && c.Reason == turnlogv1.ReasonCurrent {
				return
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("Session %s/%s not Current after %s", ns, name, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// quietAppend appends turn to the quiet Session, nudges it, and returns
// the seconds until status.headSeq shows it and until the Session is
// Current through it.
func (h *harness) quietAppend(s *turnlogv1.Session, turn int) (toHead, toCurrent float64) {
	h.t.Helper()
	head, err := h.log(s).NewAppender("quiet").Append(h.ctx, turnEvents(turn)...)
	if err != nil {
		h.t.Fatal(err)
	}
	began := time.Now()
	h.nudge(s)
	for {
		got := &turnlogv1.Session{}
		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(s), got); err != nil {
			h.t.Fatal(err)
		}
		if toHead == 0 && got.Status.HeadSeq != nil && *got.Status.HeadSeq >= head {
			toHead = time.Since(began).Seconds()
		}
		if toHead > 0 && currentThrough(got, head) {
			return toHead, time.Since(began).Seconds()
		}
		if time.Since(began) > 15*time.Minute {
			h.t.Fatalf("append of turn %d not Current after 15m (in status after %.1fs)", turn, toHead)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// flood starts a row's flood from team-a and returns what stops it.
func (h *harness) flood(row string) (stop func()) {
	h.t.Helper()
	var nudged []*turnlogv1.Session
	switch row {
	case "quiet":
		return func() {}
	case "nudges":
		for i := range *flagNudged {
			nudged = append(nudged, h.floodSession("team-a", fmt.Sprintf("nudged-%03d", i), [][][]byte{append([][]byte{startEvent()}, turnEvents(1)...)}))
		}
	case "slow":
		filler := make([][]byte, *flagSlowEvents)
		for i := range filler {
			filler[i] = []byte(`{"type":"system/message","content":"n` + strconv.Itoa(i%10) + `"}`)
		}
		for i := range *flagSlow {
			nudged = append(nudged, h.floodSession("team-a", fmt.Sprintf("slow-%d", i), [][][]byte{append([][]byte{startEvent()}, turnEvents(1)...), filler}))
		}
		h.t.Logf("slow: %d Sessions with a segment of %d events", *flagSlow, *flagSlowEvents)
	case "forks":
		var segs [][][]byte
		seg := [][]byte{startEvent()}
		for turn := 1; turn <= *flagForkTurns; turn++ {
			seg = append(seg, turnEvents(turn)...)
			if len(seg) >= 20_000 {
				segs, seg = append(segs, seg), nil
			}
		}
		if len(seg) > 0 {
			segs = append(segs, seg)
		}
		src := h.floodSession("team-a", "large", segs)
		h.waitCurrent("team-a", src.Name, 10*time.Minute)
		events := 1 + 7**flagForkTurns
		for i := range *flagForks {
			at := fmt.Sprintf("%d.5", (i+1)*events/(*flagForks+1))
			if err := h.c.Create(h.ctx, &turnlogv1.SessionFork{
				ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("fork-%03d", i)},
				Spec:       turnlogv1.SessionForkSpec{Source: turnlogv1.SessionReference{Name: src.Name}, AtSeq: at},
			}); err != nil {
				h.t.Fatal(err)
			}
		}
		return func() {}
	case "delete":
		// The forked Session and its children, all at once, each with
		// retention Delete.
		if err := h.c.DeleteAllOf(h.ctx, &turnlogv1.SessionFork{}, client.InNamespace("team-a")); err != nil {
			h.t.Fatal(err)
		}
		if err := h.c.DeleteAllOf(h.ctx, &turnlogv1.Session{}, client.InNamespace("team-a")); err != nil {
			h.t.Fatal(err)
		}
		return func() {}
	default:
		h.t.Fatalf("-flood.rows: unknown flood %q", row)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			// Eight nudgers at once, as a tenant's many hosts would.
			var round sync.WaitGroup
			for w := range 8 {
				round.Go(func() {
					for i := w; i < len(nudged); i += 8 {
						h.nudge(nudged[i])
					}
				})
			}
			round.Wait()
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// resetPeak starts the manager's peak RSS (VmHWM) afresh.
func (m *managerProc) resetPeak() {
	m.t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", m.cmd.Process.Pid), []byte("5"), 0); err != nil {
		m.t.Fatalf("reset the manager's peak RSS: %v", err)
	}
}

// cpuSeconds is the CPU time the manager used so far.
func (m *managerProc) cpuSeconds() float64 {
	m.t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.cmd.Process.Pid))
	if err != nil {
		m.t.Fatal(err)
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// currentThrough reports whether the Session is Ready and Current with its
// log replayed through head.
func currentThrough(s *turnlogv1.Session, head int64) bool {
	for _, c := range s.Status.Conditions {
		if c.Type == turnlogv1.ConditionReady {
			return c.Status == metav1.ConditionTrue && c.Reason == turnlogv1.ReasonCurrent &&
				s.Status.Replay != nil && s.Status.Replay.ThroughSeq >= head
		}
	}
	return false
}
