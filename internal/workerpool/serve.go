package workerpool

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ServeOptions configure a worker pod's loop.
type ServeOptions struct {
	// Runs is how many runs the pod works on at once; zero is 1.
	Runs int
	// Execute does one run, given its command line; message is the
	// worker's summary, or why the run failed (err).
	Execute func(ctx context.Context, args []string) (message string, err error)
	// HeartbeatEvery is how often a lease is renewed; zero is a fifth of
	// DefaultLeaseTimeout.
	HeartbeatEvery time.Duration
	// Logf reports what the pod does; nil is silent.
	Logf func(format string, args ...any)
}

// Serve takes runs from the manager until ctx ends or the manager refuses
// the pod's token (ErrUnauthorized: the pod's credentials are stale, and
// only a new pod has the current ones). A run in progress when ctx ends is
// finished first, so a pod stopped by a scale-down or a rollout loses
// nothing; a pod killed outright loses its leases, and the manager gives
// the runs to another pod.
func Serve(ctx context.Context, c *Client, o ServeOptions) error {
	if o.Runs <= 0 {
		o.Runs = 1
	}
	if o.HeartbeatEvery <= 0 {
		o.HeartbeatEvery = DefaultLeaseTimeout / 5
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	errs := make(chan error, o.Runs)
	var wg sync.WaitGroup
	for range o.Runs {
		wg.Go(func() { errs <- serveOne(ctx, c, o) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// serveOne leases and does runs one after another.
func serveOne(ctx context.Context, c *Client, o ServeOptions) error {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		lease, ok, err := c.Lease(ctx, maxLeaseWait)
		switch {
		case errors.Is(err, ErrUnauthorized):
			return err
		case err != nil && ctx.Err() == nil:
			backoff = min(max(2*backoff, 250*time.Millisecond), 5*time.Second)
			o.Logf("asking the manager for a run: %v; again in %s", err, backoff)
			sleep(ctx, backoff)
			continue
		case !ok:
			continue
		}
		backoff = 0
		work(c, lease, o)
	}
	return nil
}

// work does one leased run under heartbeats, and reports how it ended. It
// is not cancelled with the pod's context: a pod being stopped finishes
// what it holds. It stops only if the lease is lost: the manager says so
// (the run was taken off the board, e.g. its Session moved to another
// shard, or the manager restarted), or the pod could not renew the lease
// for nearly as long as the board keeps it, so that the run has stopped
// before the board gives it to another pod: two runs of one Session never
// write at once, even when a pod is cut off from its manager.
func work(c *Client, lease Lease, o ServeOptions) {
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keep := lease.Timeout
	if keep <= 0 {
		keep = DefaultLeaseTimeout
	}
	// Two beats short: a tick may come a beat late behind a heartbeat
	// that timed out.
	keep = max(keep-2*o.HeartbeatEvery, o.HeartbeatEvery)
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		t := time.NewTicker(o.HeartbeatEvery)
		defer t.Stop()
		renewed := time.Now()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
			if time.Since(renewed) >= keep {
				o.Logf("run %s: the lease was not renewed for %s; stopping the run, which the manager gives to another pod", lease.Name, time.Since(renewed).Round(time.Millisecond))
				cancel()
				return
			}
			beat, done := context.WithTimeout(runCtx, o.HeartbeatEvery)
			err := c.Heartbeat(beat, lease.ID)
			done()
			switch {
			case err == nil:
				renewed = time.Now()
			case errors.Is(err, ErrGone) || errors.Is(err, ErrUnauthorized):
				o.Logf("run %s: %v; stopping it", lease.Name, err)
				cancel()
				return
			case runCtx.Err() == nil:
				o.Logf("run %s: heartbeat: %v", lease.Name, err)
			}
		}
	}()
	began := time.Now()
	msg, err := o.Execute(runCtx, lease.Args)
	lost := runCtx.Err() != nil
	cancel()
	<-beats
	if lost {
		return
	}
	res := Result{OK: err == nil, Message: msg}
	if err != nil {
		res.Message = err.Error()
	}
	// The result is the run's only report: try it a few times over a
	// connection the manager may be restarting; if it never lands, the
	// lease expires and the run is done again.
	for attempt := range 5 {
		ferr := c.Finish(context.Background(), lease.ID, res)
		if ferr == nil || errors.Is(ferr, ErrGone) || errors.Is(ferr, ErrUnauthorized) {
			o.Logf("run %s: %s in %s (ok=%t)", lease.Name, finishWord(ferr), time.Since(began).Round(time.Millisecond), res.OK)
			return
		}
		o.Logf("run %s: reporting the result: %v", lease.Name, ferr)
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
}

func finishWord(err error) string {
	if err != nil {
		return "finished, but the manager no longer held the lease"
	}
	return "finished"
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
