// Package versitygw runs a real S3-compatible server for tests: versitygw,
// serving a temporary directory on a free port (loopback unless told).
//
// The binary is installed on first use with "go install" into the user cache
// directory (about 100 s, needs cgo), so tests that use it work on a fresh
// machine without any setup.
package versitygw

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/toolbin"
)

const (
	// Module and Version name the release the harness installs and runs.
	Module  = "github.com/versity/versitygw"
	Version = "v1.8.0"
	region  = "us-east-1"
)

// Server is a running versitygw with one bucket created.
type Server struct {
	// URL opens the bucket with store.Open and Options().
	URL string
	// Endpoint is the server's base URL, http://HOST:PORT.
	Endpoint  string
	Bucket    string
	AccessKey string
	SecretKey string

	bin, addr, dataDir, logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd // nil while killed
	exited chan struct{}
}

// Options carries the server's credentials for store.Open, so tests need not
// put them in the process environment.
func (s *Server) Options() *store.Options {
	return &store.Options{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey}
}

// Open opens the server's bucket.
func (s *Server) Open(ctx context.Context) (store.Bucket, error) {
	return store.Open(ctx, s.URL, s.Options())
}

// Addr is the server's HOST:PORT.
func (s *Server) Addr() string { return s.addr }

// URLVia is the bucket's URL through endpoint (HOST:PORT), a proxy in front
// of the server, say.
func (s *Server) URLVia(endpoint string) string {
	return fmt.Sprintf("s3://%s?region=%s&endpoint=%s&use_path_style=true&disable_https=true",
		s.Bucket, region, url.QueryEscape("http://"+endpoint))
}

// TB is what Start needs of a test: a *testing.T or *testing.B, or
// Ginkgo's GinkgoT().
type TB interface {
	Helper()
	Log(args ...any)
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// Start installs versitygw if needed, starts it on loopback and creates a
// bucket. The server is stopped, and its data removed, when the test ends.
func Start(tb TB) *Server {
	tb.Helper()
	return StartOn(tb, "127.0.0.1")
}

// StartOn is Start listening on host, e.g. an address pods reach.
func StartOn(tb TB, host string) *Server {
	tb.Helper()
	bin, err := Binary(func(msg string) { tb.Log(msg); fmt.Fprintln(os.Stderr, msg) })
	if err != nil {
		tb.Fatalf("versitygw: %v", err)
	}
	dir, err := dataDir(tb)
	if err != nil {
		tb.Fatalf("versitygw: %v", err)
	}
	s := &Server{Bucket: "turnlog-test", AccessKey: "AK" + rand.Text(), SecretKey: rand.Text() + rand.Text(), bin: bin, dataDir: dir}
	logDir := tb.TempDir()
	for range 3 { // a free port can be taken between probing and binding
		port, err := freePort(host)
		if err != nil {
			tb.Fatalf("versitygw: %v", err)
		}
		s.addr = net.JoinHostPort(host, strconv.Itoa(port))
		s.Endpoint = "http://" + s.addr
		s.URL = s.URLVia(s.addr)
		s.logPath = filepath.Join(logDir, fmt.Sprintf("versitygw-%d.log", port))
		if err = s.launch(s.createBucket); err == nil {
			tb.Cleanup(s.stop)
			return s
		}
		s.Kill()
		tb.Logf("versitygw: %v", err)
	}
	tb.Fatalf("versitygw: could not start on %s", host)
	return nil
}

// Kill stops the server at once, as a store that crashes.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
	s.cmd = nil
}

// Restart starts a killed server again on the same address and data,
// retrying while the port is still held, and returns once it answers.
func (s *Server) Restart() error {
	var err error
	for range 20 {
		if err = s.launch(s.headBucket); err == nil {
			return nil
		}
		s.Kill()
		time.Sleep(time.Second)
	}
	return err
}

// launch starts the process and waits until ready succeeds against it.
func (s *Server) launch(ready func(context.Context, *s3.Client) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(s.bin, "--port", s.addr, "posix", s.dataDir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that stopping it also stops any children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := s3.New(s3.Options{
		Region:       region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
	// Retried until the server answers, which is also how the harness
	// knows it is up.
	for {
		err := ready(ctx, client)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			out, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("server on %s exited; its log:\n%s", s.addr, toolbin.Tail(out, 2000))
		case <-ctx.Done():
			return fmt.Errorf("server on %s did not come up: %w", s.addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Server) createBucket(ctx context.Context, client *s3.Client) error {
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)})
	return err
}

func (s *Server) headBucket(ctx context.Context, client *s3.Client) error {
	_, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.Bucket)})
	return err
}

// stop stops the server gently, at the end of the test.
func (s *Server) stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		s.Kill()
	}
}

// Binary returns the path of the versitygw binary, installing it first if it
// is missing or another version. progress is told before a slow install.
func Binary(progress func(string)) (string, error) {
	pkg := Module + "/cmd/versitygw@" + Version
	return toolbin.Tool{
		Name: "versitygw", Module: Module, Version: Version,
		About: fmt.Sprintf("installing %s (about 100 s the first time, needs cgo)", pkg),
		Build: func(dir, _ string) error {
			cmd := exec.Command("go", "install", pkg)
			cmd.Dir = dir // outside any module, so the caller's go.mod plays no part
			cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "CGO_ENABLED=1")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go install %s: %w\n%s", pkg, err, toolbin.Tail(out, 4000))
			}
			return nil
		},
	}.Path(progress)
}

// dataDir returns an empty directory for the server's posix backend, which
// stores object metadata in extended attributes: the test's temporary
// directory if its filesystem has them (tmpfs often lacks user xattrs), else
// one under the user cache directory.
func dataDir(tb TB) (string, error) {
	tmp := tb.TempDir()
	if hasXattrs(tmp) {
		return tmp, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	base := filepath.Join(cache, "turnlog", "versitygw-data")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(base, "run-")
	if err != nil {
		return "", err
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	if !hasXattrs(dir) {
		return "", fmt.Errorf("neither %s nor %s supports user extended attributes", tmp, base)
	}
	return dir, nil
}

func hasXattrs(dir string) bool {
	return syscall.Setxattr(dir, "user.turnlog-probe", []byte("1"), 0) == nil
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
