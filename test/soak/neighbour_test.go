package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

var model = agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}

// neighbour is the quiet namespace's append -> status.headSeq latency,
// and append -> Current (assembled and replayed through the new head: what
// a host waits for to resume), in seconds, without and with the other
// namespace's flood.
type neighbour struct {
	QuietMedian        float64 `json:"quietMedianSeconds"`
	QuietMax           float64 `json:"quietMaxSeconds"`
	FloodMedian        float64 `json:"floodMedianSeconds"`
	FloodMax           float64 `json:"floodMaxSeconds"`
	QuietCurrentMedian float64 `json:"quietCurrentMedianSeconds"`
	QuietCurrentMax    float64 `json:"quietCurrentMaxSeconds"`
	FloodCurrentMedian float64 `json:"floodCurrentMedianSeconds"`
	FloodCurrentMax    float64 `json:"floodCurrentMaxSeconds"`
	FloodForks         int     `json:"floodForks"`
	FloodEvents        int64   `json:"floodLogEvents"`
}

func answer(turn int64, text string) agenthost.Event {
	return agenthost.AssistantMessageEvent(turn, 0, agenthost.AssistantMessage{
		Content: []agenthost.Block{{Type: "text", Text: text}},
		API:     model.API, Provider: model.Provider, Model: model.Model, StopReason: agenthost.StopReasonStop})
}

func turnEvents(turn int64) []agenthost.Event {
	return []agenthost.Event{agenthost.TurnStart(turn), agenthost.UserText(turn, fmt.Sprintf("question %d", turn)),
		answer(turn, fmt.Sprintf("answer %d", turn)), agenthost.TurnEnd(turn, agenthost.StopReasonStop)}
}

// noisyNeighbour measures a Session of the quiet namespace taking appends
// one at a time (each nudged by agenthost, as hosts do), first alone, then
// while the flooding namespace forks a large log -soak.flood-forks times
// and nudges it and its children every second. The soak's hosts stream
// all along.
func (r *run) noisyNeighbour() *neighbour {
	st, err := agenthost.OpenStore(r.ctx, r.directURL, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	defer st.Close()
	open := func(n, name string) *agenthost.Log {
		r.create(&turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: name}})
		l, err := st.OpenSession(r.ctx, r.c, n, name)
		if err != nil {
			r.t.Fatal(err)
		}
		return l
	}
	quiet := open(quietNS, "quiet")
	app := quiet.AppenderAt(0, agenthost.AppenderOptions{})
	defer app.Close(context.Background())
	if err := app.Add(r.ctx, append([]agenthost.Event{agenthost.SessionStart(model)}, turnEvents(1)...)...); err != nil {
		r.t.Fatal(err)
	}
	head, turn := int64(4), int64(1)
	// probe appends a turn at a time and returns the sorted waits until
	// status.headSeq shows it and until the Session is Current through it.
	probe := func() (toHead, toCurrent []float64) {
		for range *flagProbes {
			turn++
			if err := app.Add(r.ctx, turnEvents(turn)...); err != nil {
				r.t.Fatal(err)
			}
			head += 4
			began := time.Now()
			var headAt float64
			for {
				var s turnlogv1.Session
				if err := r.c.Get(r.ctx, client.ObjectKey{Namespace: quietNS, Name: "quiet"}, &s); err == nil {
					if headAt == 0 && s.Status.HeadSeq != nil && *s.Status.HeadSeq >= head {
						headAt = time.Since(began).Seconds()
					}
					if headAt > 0 && current(&s, head) {
						break
					}
				}
				if time.Since(began) > 10*time.Minute {
					r.t.Fatalf("the quiet namespace's append of turn %d not Current after 10m (in status after %.1fs)", turn, headAt)
				}
				time.Sleep(20 * time.Millisecond)
			}
			toHead = append(toHead, headAt)
			toCurrent = append(toCurrent, time.Since(began).Seconds())
			time.Sleep(500 * time.Millisecond)
		}
		slices.Sort(toHead)
		slices.Sort(toCurrent)
		return toHead, toCurrent
	}
	res := &neighbour{FloodForks: *flagFloodForks}
	base, baseCurrent := probe()
	res.QuietMedian, res.QuietMax = base[len(base)/2], base[len(base)-1]
	res.QuietCurrentMedian, res.QuietCurrentMax = baseCurrent[len(baseCurrent)/2], baseCurrent[len(baseCurrent)-1]

	// The flood's large log, written as one host would import it.
	big := open(floodNS, "big")
	imp := big.AppenderAt(0, agenthost.AppenderOptions{FlushInterval: -1, NoNudge: true})
	events := []agenthost.Event{agenthost.SessionStart(model)}
	for t := int64(1); t <= int64(*flagFloodTurns); t++ {
		events = append(events, turnEvents(t)...)
	}
	res.FloodEvents = int64(len(events))
	for i := 0; i < len(events); i += 4000 {
		if err := imp.Add(r.ctx, events[i:min(i+4000, len(events))]...); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := imp.Close(r.ctx); err != nil {
		r.t.Fatal(err)
	}
	// The forks are created at once, as a script would; the manager works
	// through them while the quiet namespace is measured.
	rng := rand.New(rand.NewPCG(3, 4))
	res.FloodForks = 0
	for i := range *flagFloodForks {
		at := fmt.Sprintf("%d.%d", rng.Int64N(res.FloodEvents), rng.IntN(10))
		f := &turnlogv1.SessionFork{ObjectMeta: metav1.ObjectMeta{Namespace: floodNS, Name: fmt.Sprintf("big-fork-%03d", i)},
			Spec: turnlogv1.SessionForkSpec{Source: turnlogv1.SessionReference{Name: "big"}, AtSeq: at}}
		if err := r.c.Create(r.ctx, f); err != nil {
			r.t.Errorf("creating %s: %v", f.Name, err)
			continue
		}
		res.FloodForks++
	}
	ctx, cancel := context.WithCancel(r.ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			var list turnlogv1.SessionList
			if err := r.c.List(ctx, &list, client.InNamespace(floodNS)); err == nil {
				for i := range list.Items {
					nudge(ctx, r.c, &list.Items[i])
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	})
	flood, floodCurrent := probe()
	cancel()
	wg.Wait()
	res.FloodMedian, res.FloodMax = flood[len(flood)/2], flood[len(flood)-1]
	res.FloodCurrentMedian, res.FloodCurrentMax = floodCurrent[len(floodCurrent)/2], floodCurrent[len(floodCurrent)-1]
	r.t.Logf("noisy neighbour: the quiet namespace's append -> status median %.2fs (max %.2fs) alone, %.2fs (max %.2fs) during the flood; "+
		"append -> Current median %.2fs (max %.2fs) alone, %.2fs (max %.2fs) during the flood",
		res.QuietMedian, res.QuietMax, res.FloodMedian, res.FloodMax,
		res.QuietCurrentMedian, res.QuietCurrentMax, res.FloodCurrentMedian, res.FloodCurrentMax)
	if limit := max(5*res.QuietMedian, res.QuietMedian+5); res.FloodMedian > limit {
		r.t.Errorf("the flood slowed the quiet namespace's appends from %.2fs to %.2fs (median), over %.2fs", res.QuietMedian, res.FloodMedian, limit)
	}
	return res
}

// current reports whether the Session is Ready and Current with its log
// assembled and replayed through head.
func current(s *turnlogv1.Session, head int64) bool {
	for _, c := range s.Status.Conditions {
		if c.Type == turnlogv1.ConditionReady && c.Status == metav1.ConditionTrue && c.Reason == turnlogv1.ReasonCurrent {
			return s.Status.Replay != nil && s.Status.Replay.ThroughSeq >= head
		}
	}
	return false
}
