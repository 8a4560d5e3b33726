package controllers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
)

// StoreConfig is one object store the operator configured on the manager.
// Sessions name it in spec.storage.store; its URL, credentials and prefix
// are the operator's alone.
type StoreConfig struct {
	// Name is what Sessions call the store: a DNS label.
	Name string
	// URL opens the store (see store.Open).
	URL string
	// Prefix, if set, is prepended to the root of every Session's log in
	// this store: [<prefix>/]<namespace>/<name>/<uid>/.
	Prefix string
}

// Validate checks the configuration without contacting the store.
func (c StoreConfig) Validate() error {
	if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
		return fmt.Errorf("store name %q: %s", c.Name, strings.Join(errs, "; "))
	}
	if err := store.CheckURL(c.URL); err != nil {
		return fmt.Errorf("store %s: %w", c.Name, err)
	}
	if c.Prefix != "" {
		if err := store.ValidateKey(c.Prefix); err != nil {
			return fmt.Errorf("store %s: prefix %q: %w", c.Name, c.Prefix, err)
		}
	}
	return nil
}

// StoreNotFoundError: a Session names a store the manager does not have.
type StoreNotFoundError struct {
	Name       string
	Configured []string
}

func (e *StoreNotFoundError) Error() string {
	known := "none"
	if len(e.Configured) > 0 {
		known = strings.Join(e.Configured, ", ")
	}
	return fmt.Sprintf("store %q is not configured on the manager (configured stores: %s)", e.Name, known)
}

// Stores opens the object stores Sessions keep their logs in, by name.
type Stores interface {
	// Store opens the store named name, a Session's spec.storage.store (""
	// is "default"). An unknown name is a *StoreNotFoundError.
	Store(ctx context.Context, name string) (*SessionStore, error)
}

// SessionStore is an opened store with its configuration.
type SessionStore struct {
	StoreConfig
	Logs *sessionlog.Store
}

// Location is where session's log lives in this store (see
// sessionio.Location: its namespace and name are the Session's, so no
// Session can reach into another's root).
func (s *SessionStore) Location(session *turnlogv1.Session) sessionlog.Location {
	return sessionio.Location(s.Prefix, session)
}

// statusLocation is status.location: the store's name and the log's root
// in it.
func statusLocation(store string, loc sessionlog.Location) string {
	return store + ":" + loc.String()
}

// BucketCache opens the configured stores by name, each once for the life
// of the process (store.Buckets): behind its breaker, named by the
// configured names, whose state and failures are metrics, and counted in
// turnlog_store_requests_total.
type BucketCache struct {
	// Configured are the stores by name.
	Configured map[string]StoreConfig

	buckets *store.Buckets
	// closed is told the name of a store whose breaker closed again.
	closed func(string)
}

// OnBreakerClosed has f told the name of each store whose breaker closes
// again (the name in its OpenCircuitError). It must be set before the
// cache opens a store.
func (c *BucketCache) OnBreakerClosed(f func(string)) { c.closed = f }

// NewBucketCache checks configs (names unique, each valid) and returns a
// cache serving them, opened with opts.
func NewBucketCache(configs []StoreConfig, opts *store.Options) (*BucketCache, error) {
	c := &BucketCache{Configured: map[string]StoreConfig{}}
	c.buckets = store.NewBuckets(store.BucketsOptions{
		Open: opts,
		Guard: func(url string) store.GuardOptions {
			return guardOptions(c.namesOf(url), func(name string) {
				if c.closed != nil {
					c.closed(name)
				}
			})
		},
		Wrap: func(b store.Bucket) store.Bucket { return metered(b) },
	})
	for _, sc := range configs {
		if err := sc.Validate(); err != nil {
			return nil, err
		}
		if _, dup := c.Configured[sc.Name]; dup {
			return nil, fmt.Errorf("store %s is configured twice", sc.Name)
		}
		c.Configured[sc.Name] = sc
	}
	return c, nil
}

// Store implements Stores.
func (c *BucketCache) Store(ctx context.Context, name string) (*SessionStore, error) {
	if name == "" {
		name = turnlogv1.DefaultStore
	}
	sc, ok := c.Configured[name]
	if !ok {
		return nil, &StoreNotFoundError{Name: name, Configured: slices.Sorted(func(yield func(string) bool) {
			for n := range c.Configured {
				if !yield(n) {
					return
				}
			}
		})}
	}
	b, err := c.buckets.Bucket(ctx, sc.URL)
	if err != nil {
		return nil, err
	}
	return &SessionStore{StoreConfig: sc, Logs: sessionlog.New(b)}, nil
}

// namesOf is the name of the store at url, for its breaker's errors and
// metrics: the names of every configured store with that URL, which share
// its bucket (and so its connections and its breaker).
func (c *BucketCache) namesOf(url string) string {
	var names []string
	for name, sc := range c.Configured {
		if sc.URL == url {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// Close closes every bucket opened so far.
func (c *BucketCache) Close() error { return c.buckets.Close() }

// ParseStoreFlag parses the value of a --store flag, NAME=URL.
func ParseStoreFlag(value string) (StoreConfig, error) {
	name, url, ok := strings.Cut(value, "=")
	if !ok {
		return StoreConfig{}, fmt.Errorf("--store %q: want NAME=URL", value)
	}
	sc := StoreConfig{Name: name, URL: url}
	if err := sc.Validate(); err != nil {
		return StoreConfig{}, fmt.Errorf("--store %q: %w", value, err)
	}
	return sc, nil
}

var storesLine = regexp.MustCompile(`^(\S+)\s+(\S+)(?:\s+(\S+))?$`)

// ReadStoresFile reads a stores file: one store per line, "NAME URL
// [PREFIX]", blank lines and lines starting with '#' ignored. It is meant
// to be a key of a ConfigMap mounted into the manager.
func ReadStoresFile(path string) ([]StoreConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []StoreConfig
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := storesLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: %q: want NAME URL [PREFIX]", path, n, line)
		}
		c := StoreConfig{Name: m[1], URL: m[2], Prefix: m[3]}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// storeProblem is the Ready condition for a store that failed: a stable
// message naming the store and what was being done, and the reason. The
// backend's own error, which may quote hosts, paths, response bodies or
// credentials' names, goes to the manager's log only; errors about the
// log's data are turnlog's own and shown as they are, and so is an entry
// the file store refused, named by its key (never by a host path or by
// where a link points).
func storeProblem(ctx context.Context, storeName, doing string, err error) *condition {
	var notFound *StoreNotFoundError
	if errors.As(err, &notFound) {
		return &condition{turnlogv1.ReasonStoreNotFound, notFound.Error()}
	}
	if refused, ok := errors.AsType[*store.RefusedError](err); ok {
		return &condition{turnlogv1.ReasonObjectRefused, fmt.Sprintf(
			"%s: store %q refused %s: it is %s; a Session's root in a file:// store may hold only regular files and directories, and nothing else is followed or opened",
			doing, storeName, derived.Truncate(refused.At, 400), refused.Kind)}
	}
	if open, ok := errors.AsType[*store.OpenCircuitError](err); ok {
		// Said at once, without the backend's error (in the manager's
		// log when the breaker opened) and without logging each refusal.
		return &condition{turnlogv1.ReasonStoreUnavailable, fmt.Sprintf(
			"%s: store %q is unavailable: its last %d requests failed (%s) and it is tried again every %s; the details are in the manager's log",
			doing, storeName, open.Failures, storeFailure(open.Last), store.DefaultBreakerOpenFor)}
	}
	var data *sessionlog.DataError
	if errors.As(err, &data) && data.InReferences() {
		// A fork's references are the manager's to write; one a host
		// forged or broke is refused, said once in an Event, and never
		// followed outside the namespace.
		return &condition{turnlogv1.ReasonObjectRefused, fmt.Sprintf(
			"%s: %s; a fork's references are written by the manager alone (docs/log-format.md, \"Forks by reference\")", doing, derived.Truncate(data.Error(), 700))}
	}
	if errors.As(err, &data) {
		return &condition{turnlogv1.ReasonStoreUnavailable, fmt.Sprintf("%s: %s", doing, derived.Truncate(data.Error(), 800))}
	}
	ctrl.LoggerFrom(ctx).Error(err, "object store failed", "store", storeName, "doing", doing)
	return &condition{turnlogv1.ReasonStoreUnavailable, fmt.Sprintf("%s: store %q %s; the details are in the manager's log", doing, storeName, storeFailure(err))}
}

// storeFailure says in a stable phrase how a store operation failed.
func storeFailure(err error) string {
	switch {
	case errors.Is(err, store.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, store.ErrUnavailable):
		return "is unavailable"
	case errors.Is(err, store.ErrNotFound):
		return "lacks an object the log needs"
	default:
		return "could not be used"
	}
}

// reportRefused raises the one Warning ObjectRefused Event of a Session
// whose Ready condition is ObjectRefused, and forgets it once the Session
// is no longer refused, so that a refusal that comes back is announced
// again.
func (r *SessionReconciler) reportRefused(s *sessionScope) {
	const task = "refused"
	if s.ready == nil || s.ready.reason != turnlogv1.ReasonObjectRefused {
		r.reported.Delete(string(s.session.UID) + "/" + task)
		return
	}
	if r.firstReport(s.session, task, s.ready.message) {
		r.Recorder.Eventf(s.session, nil, "Warning", turnlogv1.EventObjectRefused, "Read", "%s", derived.Truncate(s.ready.message, maxNote))
	}
}
