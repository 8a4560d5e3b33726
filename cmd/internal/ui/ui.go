// Package ui is `turnlog ui` and `kubectl turnlog ui`: a web page, served
// on loopback by the user's own process, that shows the Sessions the
// user's kubeconfig can read, each Session's stored transcript with its
// degraded messages and the frozen partial text of its stopped responses,
// its Events, its SessionForks and its fork tree, and forks a Session from
// any message. It compares two Sessions of a fork tree from where their
// logs part, and searches the Sessions list.
//
// The page reads and writes only through the user's own credentials: the
// Kubernetes client and the object store the command was started with.
// It never renders a store URL, a credential or a Secret: every answer is
// built from a view type of its own, never from a whole object. The fork
// action is a POST that must carry the page's per-process token and come
// from the page's own origin; every request must name the address the
// server listens on, so a page of another site cannot read it through a
// DNS name it points at loopback.
package ui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
)

//go:embed assets
var assets embed.FS

// Options are what a server reads and writes with.
type Options struct {
	// Kube is the user's own client.
	Kube client.WithWatch
	// Namespace is the namespace the Sessions page opens on.
	Namespace string
	// Store is the object store Sessions' logs are in, opened with the
	// user's credentials; nil when none was given: the pages then show
	// what the cluster has, without transcripts.
	Store *agenthost.Store
}

// Server serves the pages and their API.
type Server struct {
	opts  Options
	token string
	page  *template.Template
	hosts []string // the Host headers a request may carry
	// textReads bounds the logs a text search of one list reads
	// (maxTextReads); lastUsers keeps what they held.
	textReads int
	lastUsers lastUserCache
}

// Serve serves the UI on ln until ctx is done.
func Serve(ctx context.Context, ln net.Listener, opts Options) error {
	s, err := newServer(opts, ln.Addr())
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		srv.Close() // event streams do not end on Shutdown
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Listen listens on addr (host:port) and returns the listener and the
// page's URL.
func Listen(addr string) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	return ln, "http://" + ln.Addr().String() + "/", nil
}

// IsLoopback reports whether host (an address flag's host part) is a
// loopback address or localhost.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func newServer(opts Options, addr net.Addr) (*Server, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	page, err := template.ParseFS(assets, "assets/index.html")
	if err != nil {
		return nil, err
	}
	hosts := []string{addr.String()}
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		hosts = append(hosts, fmt.Sprintf("localhost:%d", tcp.Port))
	}
	return &Server{opts: opts, token: hex.EncodeToString(raw), page: page, hosts: hosts, textReads: maxTextReads}, nil
}

// Handler is the server's routes, behind the Host check.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /s/{namespace}/{name}", s.index)
	mux.HandleFunc("GET /compare/{namespacea}/{namea}/{namespaceb}/{nameb}", s.index)
	mux.HandleFunc("GET /api/sessions/watch", s.watchSessions)
	mux.HandleFunc("GET /api/sessions/{namespace}/{name}", s.session)
	mux.HandleFunc("GET /api/sessions/{namespace}/{name}/turns", s.turns)
	mux.HandleFunc("POST /api/sessions/{namespace}/{name}/forks", s.createFork)
	mux.HandleFunc("GET /api/forks/{namespace}/{name}", s.fork)
	mux.HandleFunc("GET /api/compare/{namespacea}/{namea}/{namespaceb}/{nameb}", s.comparison)
	return s.guard(mux)
}

// guard refuses a request that names another host than the one the
// server listens on, and sets the headers every answer carries.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.knownHost(r.Host) {
			http.Error(w, "turnlog ui answers only requests for "+s.hosts[0], http.StatusMisdirectedRequest)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) knownHost(host string) bool {
	for _, h := range s.hosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// sameOrigin checks a state-changing request: the page's token in the
// X-Turnlog-Token header (a cross-site form cannot set a header, and a
// cross-site script cannot read the token), and, when the browser says
// where the request comes from, that it is this server.
func (s *Server) sameOrigin(r *http.Request) error {
	got := r.Header.Get("X-Turnlog-Token")
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
		return errors.New("the request does not carry this page's token: reload the page")
	}
	if origin := r.Header.Get("Origin"); origin != "" && origin != "http://"+r.Host {
		return fmt.Errorf("a request from %s is not allowed", origin)
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return fmt.Errorf("a %s request is not allowed", site)
	}
	return nil
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = s.page.Execute(w, struct{ Token, Namespace string }{s.token, s.opts.Namespace})
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}

// writeError answers with one line saying what went wrong.
func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": strings.ReplaceAll(err.Error(), "\n", " ")})
}

// readJSON decodes a small request body into v.
func readJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad request body: %w", err)
	}
	return nil
}

// Run serves the UI on addr until ctx is done, as `turnlog ui` and
// `kubectl turnlog ui` do: it prints the page's URL on stdout, and on
// stderr a warning when addr is not a loopback address.
func Run(ctx context.Context, addr string, opts Options, stdout, stderr io.Writer) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--address: %w", err)
	}
	ln, url, err := Listen(addr)
	if err != nil {
		return err
	}
	if !IsLoopback(host) {
		fmt.Fprintf(stderr, "warning: listening on %s, not on loopback: whoever reaches it acts with your credentials\n", ln.Addr())
	}
	fmt.Fprintf(stdout, "turnlog ui: %s (Ctrl-C stops it)\n", url)
	return Serve(ctx, ln, opts)
}
