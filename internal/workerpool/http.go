package workerpool

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Tokens are the namespaces' credentials: a pod of namespace N holds
// Token(N), which leases N's runs and nothing else. They are derived from
// the manager's key, so the manager keeps none of them.
type Tokens struct{ Key []byte }

// Token is namespace's credential.
func (t Tokens) Token(namespace string) string {
	m := hmac.New(sha256.New, t.Key)
	m.Write([]byte(namespace))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Valid reports whether token is namespace's.
func (t Tokens) Valid(namespace, token string) bool {
	return len(t.Key) > 0 && subtle.ConstantTimeCompare([]byte(t.Token(namespace)), []byte(token)) == 1
}

// The routes of the pool's API, under /v1/namespaces/{namespace}/.
const (
	routeLease     = "POST /v1/namespaces/{namespace}/lease"
	routeHeartbeat = "POST /v1/namespaces/{namespace}/leases/{id}/heartbeat"
	routeResult    = "POST /v1/namespaces/{namespace}/leases/{id}/result"
)

// Result is how a run ended, as a pod reports it.
type Result struct {
	OK bool `json:"ok"`
	// Message is the worker's summary, or why the run failed.
	Message string `json:"message"`
}

// maxLeaseWait bounds how long a lease request is held waiting for a run.
const maxLeaseWait = 30 * time.Second

// Handler serves the pool's API for board: a pod presents its namespace's
// token (Authorization: Bearer) and reaches only that namespace's runs.
func Handler(board *Board, tokens Tokens) http.Handler {
	mux := http.NewServeMux()
	auth := func(next func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			ns := r.PathValue("namespace")
			token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || !tokens.Valid(ns, token) {
				http.Error(w, "this token does not hold namespace "+ns, http.StatusUnauthorized)
				return
			}
			next(w, r, ns)
		}
	}
	mux.HandleFunc(routeLease, auth(func(w http.ResponseWriter, r *http.Request, ns string) {
		pod := r.URL.Query().Get("pod")
		wait, err := time.ParseDuration(r.URL.Query().Get("wait"))
		if err != nil || wait <= 0 || wait > maxLeaseWait {
			wait = maxLeaseWait
		}
		timer := time.NewTimer(wait)
		defer timer.Stop()
		for {
			changed := board.Changed(ns)
			if lease, ok := board.TryLease(ns, pod); ok {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(lease)
				return
			}
			select {
			case <-changed:
			case <-timer.C:
				w.WriteHeader(http.StatusNoContent)
				return
			case <-r.Context().Done():
				return
			}
		}
	}))
	mux.HandleFunc(routeHeartbeat, auth(func(w http.ResponseWriter, r *http.Request, ns string) {
		answer(w, board.Heartbeat(ns, r.PathValue("id")))
	}))
	mux.HandleFunc(routeResult, auth(func(w http.ResponseWriter, r *http.Request, ns string) {
		var res Result
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&res); err != nil {
			http.Error(w, "the result is not JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		answer(w, board.Finish(ns, r.PathValue("id"), res.OK, res.Message))
	}))
	return mux
}

func answer(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrGone) {
		http.Error(w, err.Error(), http.StatusGone)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ErrUnauthorized: the manager does not accept the pod's token (it was
// restarted with another key, and the pod has not been replaced yet).
var ErrUnauthorized = errors.New("the manager refused this pod's token")

// Client is a worker pod's side of the API.
type Client struct {
	// Endpoint is the manager's URL, https://host:port.
	Endpoint  string
	Namespace string
	Pod       string
	Token     string
	HTTP      *http.Client
}

// NewClient returns a client that trusts only the PEM certificates in ca.
func NewClient(endpoint, namespace, pod, token string, ca []byte) (*Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("worker endpoint %q: want https://HOST:PORT", endpoint)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("the manager's CA holds no PEM certificate")
	}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     time.Minute,
	}
	return &Client{Endpoint: strings.TrimRight(endpoint, "/"), Namespace: namespace, Pod: pod, Token: token,
		HTTP: &http.Client{Transport: transport, Timeout: maxLeaseWait + 15*time.Second}}, nil
}

// Lease waits up to wait for a run; ok is false if none came.
func (c *Client) Lease(ctx context.Context, wait time.Duration) (lease Lease, ok bool, err error) {
	q := url.Values{"pod": {c.Pod}, "wait": {wait.String()}}
	resp, err := c.post(ctx, "/lease?"+q.Encode(), nil)
	if err != nil {
		return Lease{}, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return Lease{}, false, nil
	}
	err = json.NewDecoder(resp.Body).Decode(&lease)
	return lease, err == nil, err
}

// Heartbeat keeps the lease alive; ErrGone means the run is no longer this
// pod's to finish.
func (c *Client) Heartbeat(ctx context.Context, id string) error {
	resp, err := c.post(ctx, "/leases/"+url.PathEscape(id)+"/heartbeat", nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Finish reports how the leased run ended.
func (c *Client) Finish(ctx context.Context, id string, res Result) error {
	body, _ := json.Marshal(res)
	resp, err := c.post(ctx, "/leases/"+url.PathEscape(id)+"/result", body)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// post sends a request under the namespace's path, turning the API's
// refusals into ErrUnauthorized and ErrGone.
func (c *Client) post(ctx context.Context, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Endpoint+"/v1/namespaces/"+url.PathEscape(c.Namespace)+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent:
		return resp, nil
	case http.StatusUnauthorized:
		resp.Body.Close()
		return nil, ErrUnauthorized
	case http.StatusGone:
		resp.Body.Close()
		return nil, ErrGone
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	return nil, fmt.Errorf("the manager answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
}
