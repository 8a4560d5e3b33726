package soak

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// probeSession is the Session of ns, on the default store, that takes a
// turn at a time while the faults are injected.
const probeSession = "probe"

// probeSample is one append of the probe: when agenthost acknowledged it,
// and how long after that the Session was Current through it.
type probeSample struct {
	acked, current time.Time
	timedOut       bool
}

// latency sums up append -> Current of the probe's appends in one kind of
// window, in seconds.
type latency struct {
	Appends int     `json:"appends"`
	Median  float64 `json:"medianSeconds"`
	Max     float64 `json:"maxSeconds"`
	// TimedOut: appends not Current within probeTimeout (counted in
	// Max as probeTimeout).
	TimedOut int `json:"timedOut,omitempty"`
}

// secondStoreFigures are the second store's share of the soak and what its
// outages did to the default store's Sessions.
type secondStoreFigures struct {
	Sessions      []string `json:"sessions"`
	Hosts         []string `json:"hosts"`
	Outages       int      `json:"outages"`
	OutageSeconds float64  `json:"outageSeconds"`
	// The probe's append -> Current (a Session of ns on the default
	// store, sharing its namespace's worker pods with the second store's
	// Sessions): appended while the second store was down; appended and
	// Current with no fault going on; and during the other faults.
	DuringOutage  latency `json:"defaultStoreDuringOutage"`
	OutsideFaults latency `json:"defaultStoreOutsideFaults"`
	OtherFaults   latency `json:"defaultStoreDuringOtherFaults"`
	// HostFlushWaits are, by store, the hosts' acknowledging flushes
	// that had to be retried (the store was down or slow) and the
	// longest wait of one.
	HostFlushWaits map[string]flushWaits `json:"hostFlushWaits"`
}

type flushWaits struct {
	Retried        int     `json:"retriedFlushes"`
	LongestSeconds float64 `json:"longestSeconds"`
}

// hostFlushWaits reads the hosts' logs for their retried flushes
// ("retried: <session>: a flush waited <duration> ...").
func (r *run) hostFlushWaits() map[string]flushWaits {
	out := map[string]flushWaits{}
	for _, h := range r.hosts {
		data, _ := os.ReadFile(h.logPath)
		w := out[h.store]
		for line := range strings.Lines(string(data)) {
			if !strings.HasPrefix(line, "retried: ") {
				continue
			}
			_, after, _ := strings.Cut(line, " waited ")
			d, err := time.ParseDuration(strings.Fields(after + " x")[0])
			if err != nil {
				r.t.Logf("%s: %q: %v", h.name, strings.TrimSpace(line), err)
				continue
			}
			w.Retried++
			w.LongestSeconds = max(w.LongestSeconds, d.Seconds())
		}
		out[h.store] = w
	}
	return out
}

// probeTimeout is how long the probe waits for one append to be Current
// before it gives up on it and appends the next.
const probeTimeout = 5 * time.Minute

// probeDefaultStore creates the probe Session and has it take a turn at a
// time, through the fault proxy as the hosts write, waiting after each
// until the Session is Current through it (as the noisy neighbour's quiet
// Session does); what it returns stops it, the turn it is in finished,
// and yields the samples.
func (r *run) probeDefaultStore() (stop func() []probeSample) {
	r.create(&turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: probeSession}})
	st, err := agenthost.OpenStore(r.ctx, r.storeURL, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	log, err := st.OpenSession(r.ctx, r.c, ns, probeSession)
	if err != nil {
		r.t.Fatal(err)
	}
	app := log.AppenderAt(0, agenthost.AppenderOptions{Writer: probeSession})
	ctx, cancel := context.WithCancel(r.ctx)
	var samples []probeSample
	var wg sync.WaitGroup
	wg.Go(func() {
		defer st.Close()
		// The appends finish even once stopped: a turn is written
		// whole, retried while the store fails (a fault), as a host
		// retries its flushes.
		bg := context.Background()
		defer app.Close(bg)
		next := int64(0)
		add := func(events ...agenthost.Event) bool {
			err := app.Add(bg, events...)
			for began := time.Now(); err != nil; err = app.Flush(bg) {
				if errors.Is(err, agenthost.ErrStaleWriter) || errors.Is(err, agenthost.ErrClosed) || time.Since(began) > 10*time.Minute {
					r.t.Errorf("the probe Session %s/%s: %v", ns, probeSession, err)
					return false
				}
				time.Sleep(500 * time.Millisecond)
			}
			next += int64(len(events))
			return true
		}
		if !add(append([]agenthost.Event{agenthost.SessionStart(model)}, turnEvents(1)...)...) {
			return
		}
		for turn := int64(2); ctx.Err() == nil; turn++ {
			if !add(turnEvents(turn)...) {
				return
			}
			s := probeSample{acked: time.Now()}
			for {
				var session turnlogv1.Session
				if err := r.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: probeSession}, &session); err == nil && current(&session, next-1) {
					s.current = time.Now()
					break
				}
				if ctx.Err() != nil {
					return // stopped while waiting: not a sample
				}
				if time.Since(s.acked) > probeTimeout {
					s.current, s.timedOut = time.Now(), true
					r.t.Logf("the probe Session %s/%s: turn %d not Current %s after its append", ns, probeSession, turn, probeTimeout)
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			samples = append(samples, s)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	})
	return func() []probeSample { cancel(); wg.Wait(); return samples }
}

// secondStoreFigures sorts the probe's samples by the faults they met and
// logs the default store's append -> Current during the second store's
// outages beside the figure outside faults. It is a measurement, not an
// assertion: what must hold (nothing lost, everything settles) is checked
// with the rest.
func (r *run) secondStoreFigures(samples []probeSample) *secondStoreFigures {
	res := &secondStoreFigures{Sessions: r.secondSessions}
	for _, h := range r.hosts {
		if h.store == secondStore {
			res.Hosts = append(res.Hosts, h.name)
		}
	}
	windows := r.faults.all()
	for _, w := range windows {
		if w.kind == faultSecondStore {
			res.Outages++
			res.OutageSeconds = secondStoreOutage().Seconds()
		}
	}
	var during, outside, other []float64
	for _, s := range samples {
		d := s.current.Sub(s.acked).Seconds()
		if s.timedOut {
			d = probeTimeout.Seconds()
		}
		inOutage, inFault := false, false
		for _, w := range windows {
			if w.kind == faultSecondStore && !s.acked.Before(w.start) && !s.acked.After(w.end) {
				inOutage = true
			}
			if s.acked.Before(w.end) && s.current.After(w.start) {
				inFault = true
			}
		}
		switch {
		case inOutage:
			during = append(during, d)
			res.DuringOutage.TimedOut += b2i(s.timedOut)
		case !inFault:
			outside = append(outside, d)
			res.OutsideFaults.TimedOut += b2i(s.timedOut)
		default:
			other = append(other, d)
			res.OtherFaults.TimedOut += b2i(s.timedOut)
		}
	}
	summarize(&res.DuringOutage, during)
	summarize(&res.OutsideFaults, outside)
	summarize(&res.OtherFaults, other)
	r.t.Logf("second store %q (Sessions %s; hosts %s) down %d× for %.0fs: the default store's append -> Current median %.2fs (max %.2fs, %d appends) during the outage, "+
		"%.2fs (max %.2fs, %d appends) outside faults, %.2fs (max %.2fs, %d appends) during the other faults",
		secondStore, strings.Join(res.Sessions, ","), strings.Join(res.Hosts, ","), res.Outages, res.OutageSeconds,
		res.DuringOutage.Median, res.DuringOutage.Max, res.DuringOutage.Appends,
		res.OutsideFaults.Median, res.OutsideFaults.Max, res.OutsideFaults.Appends,
		res.OtherFaults.Median, res.OtherFaults.Max, res.OtherFaults.Appends)
	return res
}

func summarize(l *latency, seconds []float64) {
	l.Appends = len(seconds)
	if len(seconds) == 0 {
		return
	}
	slices.Sort(seconds)
	l.Median, l.Max = seconds[len(seconds)/2], seconds[len(seconds)-1]
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
