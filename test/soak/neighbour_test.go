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
// in seconds, without and with the other namespace's flood.
type neighbour struct {
	QuietMedian float64 `json:"quietMedianSeconds"`
	QuietMax    float64 `json:"quietMaxSeconds"`
	FloodMedian float64 `json:"floodMedianSeconds"`
	FloodMax    float64 `json:"floodMaxSeconds"`
	FloodForks  int     `json:"floodForks"`
	FloodEvents int64   `json:"floodLogEvents"`
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
	probe := func() []float64 {
		var waits []float64
		for range *flagProbes {
			turn++
			if err := app.Add(r.ctx, turnEvents(turn)...); err != nil {
				r.t.Fatal(err)
			}
			head += 4
			began := time.Now()
			for {
				var s turnlogv1.Session
				if err := r.c.Get(r.ctx, client.ObjectKey{Namespace: quietNS, Name: "quiet"}, &s); err == nil &&
					s.Status.HeadSeq != nil && *s.Status.HeadSeq >= head {
					break
				}
				if time.Since(began) > 5*time.Minute {
					r.t.Fatalf("the quiet namespace's append of turn %d not in status after 5m", turn)
				}
				time.Sleep(20 * time.Millisecond)
			}
			waits = append(waits, time.Since(began).Seconds())
			time.Sleep(500 * time.Millisecond)
		}
		slices.Sort(waits)
		return waits
	}
	res := &neighbour{FloodForks: *flagFloodForks}
	base := probe()
	res.QuietMedian, res.QuietMax = base[len(base)/2], base[len(base)-1]

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
	flood := probe()
	cancel()
	wg.Wait()
	res.FloodMedian, res.FloodMax = flood[len(flood)/2], flood[len(flood)-1]
	r.t.Logf("noisy neighbour: the quiet namespace's append -> status median %.2fs (max %.2fs) alone, %.2fs (max %.2fs) during the flood",
		res.QuietMedian, res.QuietMax, res.FloodMedian, res.FloodMax)
	if limit := max(5*res.QuietMedian, res.QuietMedian+5); res.FloodMedian > limit {
		r.t.Errorf("the flood slowed the quiet namespace's appends from %.2fs to %.2fs (median), over %.2fs", res.QuietMedian, res.FloodMedian, limit)
	}
	return res
}
