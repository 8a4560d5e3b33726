package pirecord

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
)

// faultProxy stands between the package's S3 client and versitygw and
// fails requests the way object stores do: a segment write that succeeds
// but whose answer never comes (the client times out), 503 Slow Down, 409
// ConditionalRequestConflict, and a 412 for a key that is free.
type faultProxy struct {
	srv      *httptest.Server
	upstream *url.URL
	stall    time.Duration
	mu       sync.Mutex
	puts     int
	heads    int
	injected map[string]int
}

func newFaultProxy(t *testing.T, upstream string, stall time.Duration) *faultProxy {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{upstream: u, stall: stall, injected: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// fault decides what happens to a request: "" passes it on.
func (p *faultProxy) fault(r *http.Request) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !strings.Contains(r.URL.Path, "/log/") {
		return ""
	}
	var f string
	switch r.Method {
	case http.MethodPut:
		p.puts++
		f = [...]string{"", "lost-answer", "503", "409", "spurious-412", "", "lost-answer", "", "503"}[p.puts%9]
	case http.MethodHead:
		p.heads++
		if p.heads%3 == 0 {
			f = "503"
		}
	}
	if f != "" {
		p.injected[f]++
	}
	return f
}

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fault := p.fault(r)
	s3err := func(status int, code string) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected</Message></Error>`, code)
	}
	switch fault {
	case "503":
		s3err(http.StatusServiceUnavailable, "SlowDown")
		return
	case "409":
		s3err(http.StatusConflict, "ConditionalRequestConflict")
		return
	case "spurious-412":
		s3err(http.StatusPreconditionFailed, "PreconditionFailed")
		return
	}
	out, err := http.NewRequest(r.Method, p.upstream.String()+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.Host = r.Host // the signature covers the host
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	respBody, _ := io.ReadAll(resp.Body)
	if fault == "lost-answer" {
		// The write is done; the client never hears of it.
		select {
		case <-r.Context().Done():
		case <-time.After(p.stall):
		}
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
			}
		}
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

// TestStoreFaultsWhilePiStreams: the store fails while pi streams several
// turns — answers lost after the write landed, 503s, 409 conflicts, 412s
// for free keys, failing HEADs. Nothing is lost and nothing is in the log
// twice: it validates, every streamed response adds up to pi's message,
// every pi entry is there once, and the transcript is pi's context.
func TestStoreFaultsWhilePiStreams(t *testing.T) {
	gw := versitygw.Start(t)
	proxy := newFaultProxy(t, gw.Endpoint, 1500*time.Millisecond)
	storeURL := strings.Replace(gw.URL, url.QueryEscape(gw.Endpoint), url.QueryEscape(proxy.srv.URL), 1)
	prov := newProvider(t)
	ref := sessionRef{gw: gw, loc: agenthost.Location{Namespace: "team-b", Session: "chat-faults", UID: "c0ffee-faults"}}
	e := newEnv(t, prov, storeURL, gw, ref.loc.Namespace, ref.loc.Session, ref.loc.UID)
	e.Vars = append(e.Vars, "TURNLOG_S3_TIMEOUT_MS=700")
	pi := e.Start()
	for i := range 4 {
		prov.Queue(
			reply{Blocks: []block{
				{Kind: "thinking", Text: fmt.Sprintf("Turn %d: look at the notes first, carefully and slowly.", i), Sig: fmt.Sprintf("sig-f%d", i)},
				{Kind: "text", Text: fmt.Sprintf("Reading the notes for question %d.", i)},
				{Kind: "tool_use", ID: fmt.Sprintf("toolu_f%d", i), Name: "read", Text: `{"path":"notes.txt"}`},
			}, Stop: "tool_use"},
			reply{Blocks: []block{{Kind: "text", Text: fmt.Sprintf("Answer %d: the launch is on Tuesday, as the notes say.", i)}}, Stop: "end_turn"},
		)
		pi.Prompt(fmt.Sprintf("Question %d: when is the launch?", i))
		// As a person would, wait for the answer before asking again:
		// until the turn is in the store.
		waitTurns(t, ref, i+1)
	}
	file, _ := pi.Call(map[string]any{"type": "get_state"})["sessionFile"].(string)
	pi.Quit()

	log := ref.export(t)
	events := validate(t, log)
	streams := checkStreams(t, events)
	if streams != 8 {
		t.Errorf("%d streamed responses in the log, want 8", streams)
	}
	n := compareEveryTurn(t, e, ref, log, events, file)
	proxy.mu.Lock()
	defer proxy.mu.Unlock()
	for _, f := range []string{"lost-answer", "503", "409", "spurious-412"} {
		if proxy.injected[f] == 0 {
			t.Errorf("no %s fault was injected (%d segment writes): the test did not test it", f, proxy.puts)
		}
	}
	t.Logf("%d segment writes, %d HEADs; faults injected: %v; %d events, %d transcripts equal pi's context", proxy.puts, proxy.heads, proxy.injected, len(events), n)
}

// waitTurns waits until n turns of the Session's log have ended.
func waitTurns(t *testing.T, ref sessionRef, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if got := bytes.Count(ref.export(t), []byte(`"type":"turn/end"`)); got >= n {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("%d turns in the log after 60 s, want %d", got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
