// Command host is the soak test's agent host: written on the public
// agenthost package, it streams turns into the Sessions it is given at a
// steady rate, as a host talking to a model would, and records every event
// once agenthost acknowledged it, so the checker can tell a lost or
// duplicated event from one that was never acknowledged.
//
// Each Session's log is owned by the one host process that writes it
// (Log.AppenderAt). A host started again on a Session finds the turn its
// predecessor was killed in still open and ends it as aborted, as a real
// host does after a crash.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// retryFor is how long a host retries a store that fails: the soak's
// outages (the second store down for minutes) are shorter.
const retryFor = 10 * time.Minute

var model = agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	storeURL := flag.String("store-url", "", "the store the Sessions' logs are in")
	namespace := flag.String("namespace", "", "the Sessions' namespace")
	sessions := flag.String("sessions", "", "comma-separated Session names")
	ackDir := flag.String("ack-dir", "", "directory of the acknowledgement files, one per Session")
	interval := flag.Duration("turn-interval", 2*time.Second, "pause between a Session's turns")
	delta := flag.Duration("delta-interval", 60*time.Millisecond, "pause between streamed deltas")
	flag.Parse()

	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	// SIGTERM ends each Session's stream after its current turn, so a
	// stopped host leaves no turn open; SIGKILL is the crash.
	go func() { <-sig; cancel() }()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := turnlogv1.AddToScheme(scheme); err != nil {
		fatal(err)
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fatal(err)
	}
	st, err := agenthost.OpenStore(context.Background(), *storeURL, nil)
	if err != nil {
		fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for _, name := range strings.Split(*sessions, ",") {
		wg.Go(func() {
			s := &stream{name: name, delta: *delta, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(len(name))))}
			if err := s.run(ctx, st, kube, *namespace, filepath.Join(*ackDir, name+".ack"), *interval); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	failed := false
	for err := range errs {
		fmt.Fprintln(os.Stderr, "host:", err)
		failed = true
	}
	if failed {
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "host:", err)
	os.Exit(1)
}

// stream is one Session's conversation.
type stream struct {
	name  string
	delta time.Duration
	rng   *rand.Rand

	app  *agenthost.Appender
	ack  *os.File
	next int64 // the seq of the next event added
	// added are the events added and not yet acknowledged, from seq acked.
	added []agenthost.Event
	acked int64
	turn  int64
	// userSeqs are the seqs of user messages this process wrote: what a
	// compaction may keep from and a context edit may target.
	userSeqs []int64
	counter  int
}

// ackLine is one acknowledged event: its seq and its JSON as added.
type ackLine struct {
	Seq   int64           `json:"seq"`
	Event json.RawMessage `json:"event"`
}

func (s *stream) run(ctx context.Context, st *agenthost.Store, kube client.Client, ns, ackPath string, interval time.Duration) error {
	bg := context.Background() // writes finish even after SIGTERM
	var log *agenthost.Log
	var head agenthost.Head
	// The store may be down (a fault) when the host starts: retry.
	for began := time.Now(); ; {
		var err error
		log, err = st.OpenSession(bg, kube, ns, s.name)
		if err == nil {
			head, err = log.Head(bg)
		}
		if err == nil {
			break
		}
		if time.Since(began) > retryFor {
			return err
		}
		time.Sleep(time.Second)
	}
	f, err := os.OpenFile(ackPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	s.ack = f
	s.next, s.acked, s.turn = head.Next, head.Next, head.Turns
	s.app = log.AppenderAt(head.Next, agenthost.AppenderOptions{Writer: fmt.Sprintf("%s-%d", s.name, os.Getpid())})
	defer s.app.Close(bg)
	if head.Next == 0 {
		if err := s.add(bg, true, agenthost.SessionStart(model)); err != nil {
			return err
		}
	}
	if head.TurnOpen {
		// The previous host died inside this turn.
		fmt.Fprintf(os.Stderr, "host: %s: turn %d was left open at seq %d; ending it as aborted\n", s.name, head.Turns, head.Next-1)
		if err := s.add(bg, true, agenthost.TurnEnd(head.Turns, agenthost.StopReasonAborted)); err != nil {
			return err
		}
	}
	// Sessions start out of step, so the load is steady rather than bursts.
	time.Sleep(time.Duration(s.rng.Int64N(int64(interval) + 1)))
	for ctx.Err() == nil {
		if err := s.oneTurn(bg); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval/2 + time.Duration(s.rng.Int64N(int64(interval)+1))):
		}
	}
	return nil
}

// add adds events; with flush it also flushes, retrying while the store
// fails (a fault), and records what is then acknowledged.
func (s *stream) add(ctx context.Context, flush bool, events ...agenthost.Event) error {
	s.next += int64(len(events))
	s.added = append(s.added, events...)
	began := time.Now()
	err := s.app.Add(ctx, events...)
	if errors.Is(err, agenthost.ErrStaleWriter) || errors.Is(err, agenthost.ErrClosed) {
		return err
	}
	if !flush {
		return nil // a failed flush keeps its events; the next one retries them
	}
	failed := 0 // flushes that failed, the Add's included
	if err != nil {
		failed++
	}
	for {
		if err = s.app.Flush(ctx); err == nil {
			break
		}
		failed++
		if errors.Is(err, agenthost.ErrStaleWriter) || time.Since(began) > retryFor {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
	if failed > 0 {
		// Not an error (those start "host: "): the soak reports how
		// long its hosts' flushes waited for a store that was down.
		fmt.Fprintf(os.Stderr, "retried: %s: a flush waited %s (%d failed) for the store\n", s.name, time.Since(began).Round(time.Millisecond), failed)
	}
	var b strings.Builder
	for i, e := range s.added {
		data, _ := json.Marshal(e)
		line, _ := json.Marshal(ackLine{Seq: s.acked + int64(i), Event: data})
		b.Write(line)
		b.WriteByte('\n')
	}
	if _, err := s.ack.WriteString(b.String()); err != nil {
		return err
	}
	s.acked += int64(len(s.added))
	s.added = nil
	return nil
}

func (s *stream) word() string {
	s.counter++
	return fmt.Sprintf("%s-%d-%d ", s.name, os.Getpid(), s.counter)
}

// stream adds n deltas made by mk, one every delta interval, as a model's
// stream arrives.
func (s *stream) stream(ctx context.Context, n int, mk func(string) agenthost.Event) error {
	for range n {
		if err := s.add(ctx, false, mk(s.word())); err != nil {
			return err
		}
		time.Sleep(s.delta)
	}
	return nil
}

// oneTurn streams one turn of a kind picked at random, sometimes after a
// long-session event between turns.
func (s *stream) oneTurn(ctx context.Context) error {
	if err := s.between(ctx); err != nil {
		return err
	}
	s.turn++
	t := s.turn
	userSeq := s.next + 1
	if err := s.add(ctx, false, agenthost.TurnStart(t), agenthost.UserText(t, "question "+s.word())); err != nil {
		return err
	}
	s.userSeqs = append(s.userSeqs, userSeq)
	if err := s.add(ctx, false, agenthost.ResponseStart(t, 0, model)); err != nil {
		return err
	}
	thinkingThenText := func(r int) error {
		if err := s.stream(ctx, 2+s.rng.IntN(3), func(w string) agenthost.Event { return agenthost.ThinkingDelta(t, r, 0, w, false) }); err != nil {
			return err
		}
		return s.stream(ctx, 2+s.rng.IntN(4), func(w string) agenthost.Event { return agenthost.TextDelta(t, r, 1, w) })
	}
	signed := func(id string, blocks ...*agenthost.BlockState) *agenthost.Envelope {
		return &agenthost.Envelope{Response: map[string]string{"id": id}, Blocks: blocks}
	}
	id := func() string { return fmt.Sprintf("msg_%d_%d", t, s.rng.Int64()) }
	switch k := s.rng.IntN(10); {
	case k < 4: // text after signed reasoning
		if err := thinkingThenText(0); err != nil {
			return err
		}
		return s.add(ctx, true,
			agenthost.ResponseFinish(t, 0, agenthost.StopReasonStop, signed(id(), &agenthost.BlockState{Type: "thinking", Signature: "sig-" + id()}, &agenthost.BlockState{Type: "text"}), nil),
			agenthost.TurnEnd(t, agenthost.StopReasonStop))
	case k < 7: // a tool call, its result, then the answer
		callID := fmt.Sprintf("call_%d", t)
		if err := s.stream(ctx, 3, func(w string) agenthost.Event {
			return agenthost.ToolCallDelta(t, 0, 0, callID, "grep", "")
		}); err != nil {
			return err
		}
		if err := s.add(ctx, true,
			agenthost.ToolCallDelta(t, 0, 0, callID, "grep", `{"pattern":"TODO"}`),
			agenthost.ResponseFinish(t, 0, agenthost.StopReasonToolUse, signed(id(), &agenthost.BlockState{Type: "toolCall", Signature: "sig-tc"}), nil),
			agenthost.ToolResult(t, callID, "grep", false, agenthost.Block{Type: "text", Text: "main.go:3: TODO " + s.word()}),
			agenthost.ResponseStart(t, 1, model)); err != nil {
			return err
		}
		if err := thinkingThenText(1); err != nil {
			return err
		}
		return s.add(ctx, true,
			agenthost.ResponseFinish(t, 1, agenthost.StopReasonStop, signed(id(), &agenthost.BlockState{Type: "thinking", Signature: "sig-" + id()}, &agenthost.BlockState{Type: "text"}), nil),
			agenthost.TurnEnd(t, agenthost.StopReasonStop))
	case k < 9: // the user stops the answer
		if err := thinkingThenText(0); err != nil {
			return err
		}
		return s.add(ctx, true,
			agenthost.ResponseFinish(t, 0, agenthost.StopReasonAborted, nil, nil),
			agenthost.TurnEnd(t, agenthost.StopReasonAborted))
	default: // the answer runs out of tokens
		if err := thinkingThenText(0); err != nil {
			return err
		}
		return s.add(ctx, true,
			agenthost.ResponseFinish(t, 0, agenthost.StopReasonLength, signed(id(), &agenthost.BlockState{Type: "thinking", Signature: "sig-" + id()}, &agenthost.BlockState{Type: "text"}), nil),
			agenthost.TurnEnd(t, agenthost.StopReasonLength))
	}
}

// between sometimes adds a long-session event before the next turn: a
// change of the system prompt, inserted context, a compaction keeping the
// last turns, or an edit of an earlier user message.
func (s *stream) between(ctx context.Context) error {
	text := func() []agenthost.Block { return []agenthost.Block{{Type: "text", Text: s.word()}} }
	switch k := s.rng.IntN(12); {
	case k == 0:
		return s.add(ctx, true, agenthost.SystemMessageEvent(0, agenthost.SystemMessage{Content: "You are a coding agent. " + s.word()}))
	case k == 1:
		return s.add(ctx, true, agenthost.ContextMessage(0, "bash", text()...))
	case k == 2 && len(s.userSeqs) >= 3:
		kept := s.userSeqs[len(s.userSeqs)-2]
		return s.add(ctx, true, agenthost.Compaction(0, text(), kept, 5000, nil))
	case k == 3 && len(s.userSeqs) >= 1:
		return s.add(ctx, true, agenthost.ContextEdit(0, s.userSeqs[len(s.userSeqs)-1], text()))
	}
	return nil
}
