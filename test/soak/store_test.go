package soak

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/turnlog/turnlog/internal/testutil/versitygw"
)

// gateway is versitygw run so that it can be stopped and started again on
// the same port and data: the package versitygw starts a server for a
// test's lifetime only.
type gateway struct {
	bin, addr, dataDir, logPath string
	accessKey, secretKey        string
	bucket                      string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func startGateway(t *testing.T, host, dir string) *gateway {
	bin, err := versitygw.Binary(func(msg string) { t.Log(msg) })
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "versitygw-data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	// The posix backend keeps metadata in extended attributes, which a
	// tmpfs may lack.
	if syscall.Setxattr(data, "user.soak-probe", []byte("1"), 0) != nil {
		cache, _ := os.UserCacheDir()
		if data, err = os.MkdirTemp(filepath.Join(cache, "turnlog"), "soak-data-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(data) })
	}
	port, err := freePort(host)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{
		bin: bin, addr: net.JoinHostPort(host, fmt.Sprint(port)), dataDir: data,
		logPath: filepath.Join(dir, "versitygw.log"), bucket: "turnlog-soak",
		accessKey: "AK" + crand.Text(), secretKey: crand.Text() + crand.Text(),
	}
	if err := g.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.kill)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String("http://" + g.addr), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(g.accessKey, g.secretKey, ""),
	})
	for {
		_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(g.bucket)})
		if err == nil {
			return g
		}
		if ctx.Err() != nil {
			t.Fatalf("versitygw did not come up: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// storeURL is the bucket's URL through endpoint (the gateway or the proxy).
func (g *gateway) storeURL(endpoint string) string {
	return fmt.Sprintf("s3://%s?region=us-east-1&endpoint=%s&use_path_style=true&disable_https=true",
		g.bucket, url.QueryEscape("http://"+endpoint))
}

func (g *gateway) start() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	logFile, err := os.OpenFile(g.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(g.bin, "--port", g.addr, "posix", g.dataDir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+g.accessKey, "ROOT_SECRET_KEY="+g.secretKey)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	g.cmd, g.done = cmd, done
	return nil
}

// kill stops the gateway at once, as a crashed store.
func (g *gateway) kill() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd == nil {
		return
	}
	_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
	<-g.done
	g.cmd = nil
}

// restart starts a killed gateway again on the same address, retrying
// while the port is still held.
func (g *gateway) restart() error {
	var err error
	for range 20 {
		if err = g.start(); err != nil {
			return err
		}
		time.Sleep(time.Second)
		select {
		case <-g.done:
			g.mu.Lock()
			g.cmd = nil
			g.mu.Unlock()
			err = fmt.Errorf("versitygw exited at once (see %s)", g.logPath)
			continue
		default:
			return nil
		}
	}
	return err
}

// proxy forwards TCP connections to the gateway; a fault makes it slow
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

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
