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
	"debug/buildinfo"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/turnlog/turnlog/internal/store"
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

// Start installs versitygw if needed, starts it on loopback and creates a
// bucket. The server is stopped, and its data removed, when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartOn(tb, "127.0.0.1")
}

// StartOn is Start listening on host, e.g. an address pods reach.
func StartOn(tb testing.TB, host string) *Server {
	tb.Helper()
	bin, err := Binary(func(msg string) { tb.Log(msg); fmt.Fprintln(os.Stderr, msg) })
	if err != nil {
		tb.Fatalf("versitygw: %v", err)
	}
	dir, err := dataDir(tb)
	if err != nil {
		tb.Fatalf("versitygw: %v", err)
	}
	s := &Server{Bucket: "turnlog-test", AccessKey: "AK" + rand.Text(), SecretKey: rand.Text() + rand.Text()}
	var lastErr error
	for range 3 { // a free port can be taken between probing and binding
		stop, err := s.start(bin, host, dir, tb.TempDir())
		if err == nil {
			tb.Cleanup(stop)
			return s
		}
		lastErr = err
	}
	tb.Fatalf("versitygw: %v", lastErr)
	return nil
}

func (s *Server) start(bin, host, dataDir, logDir string) (stop func(), err error) {
	port, err := freePort(host)
	if err != nil {
		return nil, err
	}
	s.Endpoint = fmt.Sprintf("http://%s", net.JoinHostPort(host, strconv.Itoa(port)))
	s.URL = fmt.Sprintf("s3://%s?region=%s&endpoint=%s&use_path_style=true&disable_https=true",
		s.Bucket, region, url.QueryEscape(s.Endpoint))

	logPath := filepath.Join(logDir, fmt.Sprintf("versitygw-%d.log", port))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "--port", net.JoinHostPort(host, strconv.Itoa(port)), "posix", dataDir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that stopping it also stops any children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.createBucket(ctx, exited); err != nil {
		stop()
		out, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("server on port %d did not come up: %w; its log:\n%s", port, err, tail(out, 2000))
	}
	return stop, nil
}

// createBucket retries until the server answers, which is also how the
// harness knows it is up.
func (s *Server) createBucket(ctx context.Context, exited <-chan struct{}) error {
	client := s3.New(s3.Options{
		Region:       region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
	for {
		_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)})
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("the process exited")
		case <-ctx.Done():
			return fmt.Errorf("create bucket: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Binary returns the path of the versitygw binary, installing it first if it
// is missing or another version. progress is told before a slow install.
func Binary(progress func(string)) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "turnlog", "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "versitygw")
	if installed(bin) {
		return bin, nil
	}
	// Test binaries of several packages run at once; one installs, the
	// others wait for it.
	lock, err := os.OpenFile(filepath.Join(dir, "versitygw.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if installed(bin) {
		return bin, nil
	}
	pkg := Module + "/cmd/versitygw@" + Version
	progress(fmt.Sprintf("versitygw: installing %s into %s (about 100 s the first time, needs cgo)", pkg, dir))
	cmd := exec.Command("go", "install", pkg)
	cmd.Dir = dir // outside any module, so the caller's go.mod plays no part
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s: %w\n%s", pkg, err, tail(out, 4000))
	}
	if !installed(bin) {
		return "", fmt.Errorf("go install %s did not produce %s at %s", pkg, bin, Version)
	}
	return bin, nil
}

func installed(bin string) bool {
	info, err := buildinfo.ReadFile(bin)
	return err == nil && info.Main.Path == Module && info.Main.Version == Version
}

// dataDir returns an empty directory for the server's posix backend, which
// stores object metadata in extended attributes: the test's temporary
// directory if its filesystem has them (tmpfs often lacks user xattrs), else
// one under the user cache directory.
func dataDir(tb testing.TB) (string, error) {
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

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
