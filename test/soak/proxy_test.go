package soak

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy forwards TCP connections to versitygw; a fault makes it slow
// (latency on every chunk a client sends) and makes it drop connections
// (new ones refused at random, open ones cut).
type proxy struct {
	ln      net.Listener
	backend string
	latency atomic.Int64 // nanoseconds
	drop    atomic.Int64 // per mille of new connections closed at once
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
}

func startProxy(t *testing.T, host, backend string) *proxy {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { _ = ln.Close() })
	go p.serve()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *proxy) handle(c net.Conn) {
	if d := p.drop.Load(); d > 0 && rand.Int64N(1000) < d {
		_ = c.Close()
		return
	}
	b, err := net.DialTimeout("tcp", p.backend, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.track(c, true)
	defer p.track(c, false)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if l := p.latency.Load(); l > 0 {
					time.Sleep(time.Duration(l))
				}
				if _, werr := b.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = b.Close()
	})
	_, _ = io.Copy(c, b)
	_ = c.Close()
	_ = b.Close()
	wg.Wait()
}

func (p *proxy) track(c net.Conn, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if open {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

// cut closes every open connection, as a network that drops them.
func (p *proxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for c := range p.conns {
		_ = c.Close()
	}
	return n
}
