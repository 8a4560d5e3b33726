package workerpool

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var testTokens = Tokens{Key: []byte("the manager's key")}

// pool is a manager's board served over TLS, as pods reach it.
type pool struct {
	board *Board
	srv   *httptest.Server
	ca    []byte
}

// newPool serves a board made with o, its handler passed through wrap if
// one is given (a network between the pods and the manager).
func newPool(t *testing.T, o Options, wrap ...func(http.Handler) http.Handler) *pool {
	t.Helper()
	b := NewBoard(o)
	h := Handler(b, testTokens)
	for _, w := range wrap {
		h = w(h)
	}
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return &pool{board: b, srv: srv, ca: ca}
}

// client is a pod of ns presenting token.
func (p *pool) client(t *testing.T, ns, token string) *Client {
	t.Helper()
	c, err := NewClient(p.srv.URL, ns, "pod-"+ns, token, p.ca)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.HTTP.CloseIdleConnections)
	return c
}

func TestHTTPLeaseAndResult(t *testing.T) {
	p := newPool(t, Options{})
	p.board.Submit(run("a", "r1"))
	c := p.client(t, "a", testTokens.Token("a"))
	ctx := t.Context()

	l, ok, err := c.Lease(ctx, time.Second)
	if err != nil || !ok {
		t.Fatalf("Lease = %v, %v; want a run", ok, err)
	}
	if l.Name != "r1" || strings.Join(l.Args, " ") != "worker replay --session=r1" {
		t.Fatalf("lease = %+v, want r1 with its command line", l)
	}
	if st := state(t, p.board, "a", "r1"); st.State != Leased || st.Pod != "pod-a" {
		t.Fatalf("r1 = %+v, want Leased by pod-a (the pod the client named)", st)
	}
	if err := c.Heartbeat(ctx, l.ID); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if err := c.Finish(ctx, l.ID, Result{OK: false, Message: "replay: the log is torn"}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	st := state(t, p.board, "a", "r1")
	if st.State != Failed || st.Message != "replay: the log is torn" || st.Attempt != l.ID {
		t.Fatalf("r1 after the result = %+v, want Failed with the pod's message", st)
	}
	// The lease is over: the pod is told so.
	if err := c.Heartbeat(ctx, l.ID); !errors.Is(err, ErrGone) {
		t.Errorf("Heartbeat after the result = %v, want ErrGone", err)
	}
	if err := c.Finish(ctx, l.ID, Result{OK: true}); !errors.Is(err, ErrGone) {
		t.Errorf("second result = %v, want ErrGone", err)
	}
}

func TestHTTPTokenHoldsOneNamespace(t *testing.T) {
	p := newPool(t, Options{})
	p.board.Submit(run("b", "rb"))
	ctx := t.Context()

	// A's token naming namespace B.
	intruder := p.client(t, "b", testTokens.Token("a"))
	if _, ok, err := intruder.Lease(ctx, 50*time.Millisecond); !errors.Is(err, ErrUnauthorized) || ok {
		t.Fatalf("Lease of B's runs with A's token = %v, %v; want ErrUnauthorized", ok, err)
	}
	if st := state(t, p.board, "b", "rb"); st.State != Waiting {
		t.Fatalf("B's run after A's pod asked for it: %s, want Waiting", st.State)
	}

	// B's own pod leases it; A's token cannot keep it alive or report it.
	own := p.client(t, "b", testTokens.Token("b"))
	l, ok, err := own.Lease(ctx, time.Second)
	if err != nil || !ok {
		t.Fatalf("B's pod: Lease = %v, %v", ok, err)
	}
	if err := intruder.Heartbeat(ctx, l.ID); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("Heartbeat of B's lease with A's token = %v, want ErrUnauthorized", err)
	}
	if err := intruder.Finish(ctx, l.ID, Result{OK: true, Message: "forged"}); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("Finish of B's lease with A's token = %v, want ErrUnauthorized", err)
	}
	// Nor can A's pod, in its own namespace, touch B's lease by its id.
	podA := p.client(t, "a", testTokens.Token("a"))
	if err := podA.Finish(ctx, l.ID, Result{OK: true, Message: "forged"}); !errors.Is(err, ErrGone) {
		t.Errorf("Finish of B's lease id under namespace A = %v, want ErrGone", err)
	}
	if st := state(t, p.board, "b", "rb"); st.State != Leased || st.Message != "" {
		t.Errorf("B's run = %+v, want still Leased, untouched", st)
	}
}

func TestHTTPWrongToken(t *testing.T) {
	p := newPool(t, Options{})
	p.board.Submit(run("a", "r1"))
	for _, token := range []string{"", "not-a-token", Tokens{Key: []byte("another manager's key")}.Token("a")} {
		c := p.client(t, "a", token)
		if _, ok, err := c.Lease(t.Context(), 50*time.Millisecond); !errors.Is(err, ErrUnauthorized) || ok {
			t.Errorf("token %q: Lease = %v, %v; want ErrUnauthorized", token, ok, err)
		}
	}
	if st := state(t, p.board, "a", "r1"); st.State != Waiting {
		t.Errorf("r1 = %s, want Waiting", st.State)
	}
	// A manager without a key accepts no token at all.
	if (Tokens{}).Valid("a", Tokens{}.Token("a")) {
		t.Error("Tokens without a key accepted a token")
	}
}

func TestHTTPLeaseLongPoll(t *testing.T) {
	p := newPool(t, Options{})
	c := p.client(t, "a", testTokens.Token("a"))

	began := time.Now()
	_, ok, err := c.Lease(t.Context(), 50*time.Millisecond)
	if err != nil || ok {
		t.Fatalf("Lease with nothing waiting = %v, %v; want ok false, no error", ok, err)
	}
	if d := time.Since(began); d < 40*time.Millisecond || d > 2*time.Second {
		t.Errorf("Lease with nothing waiting answered after %s, want about its 50ms wait", d)
	}

	// A run submitted while a pod waits is handed to it at once, long
	// before its wait ends.
	type got struct {
		l   Lease
		ok  bool
		err error
	}
	done := make(chan got, 1)
	began = time.Now()
	go func() {
		l, ok, err := c.Lease(t.Context(), 20*time.Second)
		done <- got{l, ok, err}
	}()
	time.Sleep(50 * time.Millisecond)
	// Another namespace's run does not answer it.
	p.board.Submit(run("b", "rb"))
	p.board.Submit(run("a", "r1"))
	select {
	case g := <-done:
		if g.err != nil || !g.ok || g.l.Name != "r1" {
			t.Fatalf("waiting Lease = %+v, %v, %v; want r1", g.l, g.ok, g.err)
		}
		if d := time.Since(began); d > 3*time.Second {
			t.Errorf("the waiting Lease took %s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a run was submitted and the waiting Lease did not return")
	}
	if st := state(t, p.board, "b", "rb"); st.State != Waiting {
		t.Errorf("B's run = %s, want Waiting", st.State)
	}
}

// otherCA is a self-signed certificate the test server does not hold.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(7),
		Subject:               pkix.Name{CommonName: "another manager"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestHTTPClientTrustsOnlyItsCA(t *testing.T) {
	p := newPool(t, Options{})
	p.board.Submit(run("a", "r1"))
	c, err := NewClient(p.srv.URL, "a", "pod", testTokens.Token("a"), otherCA(t))
	if err != nil {
		t.Fatal(err)
	}
	_, ok, err := c.Lease(t.Context(), 50*time.Millisecond)
	var unknown x509.UnknownAuthorityError
	if err == nil || ok || !errors.As(err, &unknown) {
		t.Fatalf("Lease from a server of another CA = %v, %v; want an unknown authority error", ok, err)
	}
	if st := state(t, p.board, "a", "r1"); st.State != Waiting {
		t.Errorf("r1 = %s, want Waiting", st.State)
	}
}

func TestHTTPNewClientRefuses(t *testing.T) {
	p := newPool(t, Options{})
	for _, c := range []struct {
		what, endpoint string
		ca             []byte
		want           string
	}{
		{"plain http", strings.Replace(p.srv.URL, "https://", "http://", 1), p.ca, "want https://"},
		{"no scheme", strings.TrimPrefix(p.srv.URL, "https://"), p.ca, "want https://"},
		{"no host", "https://", p.ca, "want https://"},
		{"a CA with no PEM", p.srv.URL, []byte("not a certificate"), "no PEM certificate"},
		{"an empty CA", p.srv.URL, nil, "no PEM certificate"},
	} {
		if cl, err := NewClient(c.endpoint, "a", "pod", "token", c.ca); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: NewClient = %v, %v; want an error saying %q", c.what, cl, err, c.want)
		}
	}
}

// executor is a pod's Execute for TestServe: what it does is named by the
// run's args.
type executor struct {
	mu       sync.Mutex
	inFlight int
	most     int
	calls    atomic.Int32
	started  chan string // a "block" run began
	stopped  chan string // a "block" run saw its context end
	release  chan struct{}
	pairIn   sync.WaitGroup
}

func (x *executor) Execute(ctx context.Context, args []string) (string, error) {
	x.calls.Add(1)
	x.mu.Lock()
	x.inFlight++
	x.most = max(x.most, x.inFlight)
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		x.inFlight--
		x.mu.Unlock()
	}()
	kind, name := args[0], args[1]
	switch kind {
	case "ok":
		time.Sleep(5 * time.Millisecond)
		return "summary of " + name, nil
	case "fail":
		return "ignored", fmt.Errorf("replay %s: the log is torn", name)
	case "pair":
		// Both runs of a pair must be in at once.
		x.pairIn.Done()
		waited := make(chan struct{})
		go func() { x.pairIn.Wait(); close(waited) }()
		select {
		case <-waited:
			return "paired " + name, nil
		case <-time.After(3 * time.Second):
			return "", errors.New("the other run of the pair never started: runs are not worked on at once")
		}
	case "block":
		x.started <- name
		select {
		case <-ctx.Done():
			x.stopped <- name
			return "", ctx.Err()
		case <-x.release:
			return "released " + name, nil
		case <-time.After(5 * time.Second):
			return "", errors.New("never stopped")
		}
	}
	return "", fmt.Errorf("unknown test run %q", args)
}

func TestServe(t *testing.T) {
	finished := make(chan Run, 16)
	o := Options{Finished: func(r Run, _ Status) { finished <- r }}
	p := newPool(t, o)
	c := p.client(t, "a", testTokens.Token("a"))
	x := &executor{started: make(chan string, 1), stopped: make(chan string, 1), release: make(chan struct{})}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, c, ServeOptions{Runs: 2, Execute: x.Execute, HeartbeatEvery: 20 * time.Millisecond, Logf: t.Logf})
	}()

	submit := func(name string, args ...string) {
		p.board.Submit(Run{Namespace: "a", Name: name, SessionUID: "uid-" + name, Args: args})
	}
	waitFinished := func(n int) map[string]bool {
		t.Helper()
		got := map[string]bool{}
		for range n {
			select {
			case r := <-finished:
				got[r.Name] = true
			case <-time.After(5 * time.Second):
				t.Fatalf("only %d of %d runs finished: %v", len(got), n, got)
			}
		}
		return got
	}

	// Five runs, all done, each with the summary Execute gave.
	for i := range 5 {
		name := fmt.Sprintf("r%d", i)
		submit(name, "ok", name)
	}
	waitFinished(5)
	for i := range 5 {
		name := fmt.Sprintf("r%d", i)
		if st := state(t, p.board, "a", name); st.State != Done || st.Message != "summary of "+name || st.Pod != "pod-a" {
			t.Errorf("%s = %+v, want Done with %q", name, st, "summary of "+name)
		}
	}

	// Two runs at once, no more.
	x.pairIn.Add(2)
	submit("p1", "pair", "p1")
	submit("p2", "pair", "p2")
	waitFinished(2)
	for _, name := range []string{"p1", "p2"} {
		if st := state(t, p.board, "a", name); st.State != Done || st.Message != "paired "+name {
			t.Errorf("%s = %+v, want Done: both runs of the pair in at once", name, st)
		}
	}
	x.mu.Lock()
	most := x.most
	x.mu.Unlock()
	if most > 2 {
		t.Errorf("%d runs at once, want at most Runs=2", most)
	}

	// A failed run is reported with Execute's error.
	submit("f1", "fail", "f1")
	waitFinished(1)
	if st := state(t, p.board, "a", "f1"); st.State != Failed || st.Message != "replay f1: the log is torn" {
		t.Errorf("f1 = %+v, want Failed with Execute's error", st)
	}

	// A run taken off the board while it runs is stopped.
	submit("b1", "block", "b1")
	select {
	case <-x.started:
	case <-time.After(5 * time.Second):
		t.Fatal("b1 never started")
	}
	p.board.Remove("a", "b1")
	select {
	case <-x.stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("b1 was removed from the board and its Execute's context did not end")
	}
	// The pod goes on taking runs.
	submit("r9", "ok", "r9")
	if got := waitFinished(1); !got["r9"] {
		t.Errorf("finished %v, want r9", got)
	}
	if _, ok := p.board.Get("a", "b1"); ok {
		t.Error("the removed run b1 came back on the board")
	}

	// A run in progress when the pod is stopped is finished first.
	submit("b2", "block", "b2")
	select {
	case <-x.started:
	case <-time.After(5 * time.Second):
		t.Fatal("b2 never started")
	}
	cancel()
	time.Sleep(50 * time.Millisecond) // beats go on past the pod's stop
	close(x.release)
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil once stopped", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if st := state(t, p.board, "a", "b2"); st.State != Done || st.Message != "released b2" {
		t.Errorf("b2, in progress when the pod stopped: %+v, want Done", st)
	}
	if n := x.calls.Load(); n != 11 {
		t.Errorf("Execute called %d times, want 11 (each run once)", n)
	}
}

// A pod cut off from its manager in the middle of a run stops the run
// before the board gives the run to another pod, which would otherwise
// write the same Session's derived data at the same time.
func TestServeStopsARunItCannotRenew(t *testing.T) {
	var lost sync.Once
	gaveAway := make(chan time.Time, 1)
	opts := Options{LeaseTimeout: 2 * time.Second, Lost: func(Run, Status) {
		lost.Do(func() { gaveAway <- time.Now() })
	}}
	var cut atomic.Bool
	p := newPool(t, opts, func(handler http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cut.Load() && strings.HasSuffix(r.URL.Path, "/heartbeat") {
				// The manager is out of reach: the connection drops.
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
			handler.ServeHTTP(w, r)
		})
	})
	b := p.board
	c := p.client(t, "a", testTokens.Token("a"))
	x := &executor{started: make(chan string, 1), stopped: make(chan string, 1), release: make(chan struct{})}
	var logs strings.Builder
	var logMu sync.Mutex
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(&logs, format+"\n", args...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = Serve(ctx, c, ServeOptions{Execute: x.Execute, HeartbeatEvery: 400 * time.Millisecond, Logf: logf})
	}()

	b.Submit(Run{Namespace: "a", Name: "b1", SessionUID: "uid-b1", Args: []string{"block", "b1"}})
	select {
	case <-x.started:
	case <-time.After(5 * time.Second):
		t.Fatal("b1 never started")
	}
	cut.Store(true)
	// The manager gives up leases as it does, looking every 50 ms.
	expiring := time.NewTicker(50 * time.Millisecond)
	defer expiring.Stop()
	giveUp := time.After(10 * time.Second)
	var stoppedAt time.Time
	for stoppedAt.IsZero() {
		select {
		case <-x.stopped:
			stoppedAt = time.Now()
		case <-expiring.C:
			b.Expire()
		case <-giveUp:
			t.Fatal("a pod that could not renew its lease went on with the run")
		}
	}
	for {
		select {
		case <-expiring.C:
			b.Expire()
		case <-giveUp:
			t.Fatal("the board never gave up the lease of the cut-off pod")
		case at := <-gaveAway:
			if at.Before(stoppedAt) {
				t.Fatalf("the board gave b1 to another pod %s before the cut-off pod stopped it", stoppedAt.Sub(at))
			}
			logMu.Lock()
			defer logMu.Unlock()
			if !strings.Contains(logs.String(), "run b1: the lease was not renewed for") {
				t.Errorf("the pod did not say why it stopped b1:\n%s", logs.String())
			}
			return
		}
	}
}

func TestServeUnauthorized(t *testing.T) {
	p := newPool(t, Options{})
	p.board.Submit(run("a", "r1"))
	c := p.client(t, "a", Tokens{Key: []byte("a restarted manager's key")}.Token("a"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var called atomic.Bool
	err := Serve(ctx, c, ServeOptions{Runs: 2, HeartbeatEvery: 20 * time.Millisecond,
		Execute: func(context.Context, []string) (string, error) { called.Store(true); return "", nil }})
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("Serve with a stale token = %v, want ErrUnauthorized", err)
	}
	if ctx.Err() != nil {
		t.Error("Serve returned only when its context ended")
	}
	if called.Load() {
		t.Error("Execute was called")
	}
	if st := state(t, p.board, "a", "r1"); st.State != Waiting {
		t.Errorf("r1 = %s, want Waiting", st.State)
	}
}
