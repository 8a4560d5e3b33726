package controllers

import (
	"context"
	"fmt"
	"io"
	"iter"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/turnlog/turnlog/internal/store"
)

// storeRequests counts the manager's requests to object storage by
// operation, on the manager's metrics endpoint: on S3 and its kin every
// request is billed, list requests most of all, so an operator should be
// able to see what idle Sessions cost.
var storeRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "turnlog_store_requests_total",
	Help: "Requests the manager made to object storage, by operation (a list counts one request per 1,000 keys, as S3 pages them).",
}, []string{"operation"})

// storeBreakerState and storeFailures show each store's circuit breaker
// (store.Guard): an operator sees which store is failing, and how.
var (
	storeBreakerState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "turnlog_store_breaker_state",
		Help: "State of each store's circuit breaker in the manager: 0 closed (requests go to the store), 1 half-open (one probe goes), 2 open (requests fail at once).",
	}, []string{"store"})
	storeFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnlog_store_failures_total",
		Help: "The manager's store requests that failed because the store could not be reached (unavailable) or did not answer in time (timeout), and those its open breaker refused (refused), by store.",
	}, []string{"store", "kind"})
)

func init() { metrics.Registry.MustRegister(storeRequests, storeBreakerState, storeFailures) }

// guardOptions are the options of the circuit breaker of the store name:
// its state and failures go to the metrics above (from 0, set here), its
// changes to the manager's log, and its closing to closed, if set.
func guardOptions(name string, closed func(string)) store.GuardOptions {
	storeBreakerState.WithLabelValues(name).Set(float64(store.BreakerClosed))
	for _, kind := range []string{"unavailable", "timeout", "refused"} {
		storeFailures.WithLabelValues(name, kind) // at 0, so that rate() sees the first failure
	}
	log := ctrl.Log.WithName("store").WithValues("store", name)
	return store.GuardOptions{
		Name: name,
		OnStateChange: func(name string, to store.BreakerState, last error) {
			storeBreakerState.WithLabelValues(name).Set(float64(to))
			if to == store.BreakerOpen {
				log.Error(last, "circuit breaker open: the store's requests fail at once until a probe succeeds", "probeEvery", store.DefaultBreakerOpenFor)
				return
			}
			log.Info("circuit breaker "+to.String(), "lastFailure", fmt.Sprint(last))
			if to == store.BreakerClosed && closed != nil {
				// Under the breaker's lock: the waking must not wait on
				// the bucket.
				go closed(name)
			}
		},
		OnFailure: func(name, kind string) { storeFailures.WithLabelValues(name, kind).Inc() },
	}
}

// listPageSize is the number of keys one S3 list request returns.
const listPageSize = 1000

// meteredBucket counts each request in storeRequests.
type meteredBucket struct {
	store.Bucket
	get, rangeRead, attributes, create, put, copy, list, delete prometheus.Counter
}

func metered(b store.Bucket) *meteredBucket {
	op := func(name string) prometheus.Counter { return storeRequests.WithLabelValues(name) }
	return &meteredBucket{Bucket: b,
		get: op("get"), rangeRead: op("range_read"), attributes: op("attributes"), create: op("create"),
		put: op("put"), copy: op("copy"), list: op("list"), delete: op("delete"),
	}
}

func (m *meteredBucket) Get(ctx context.Context, key string) ([]byte, error) {
	m.get.Inc()
	return m.Bucket.Get(ctx, key)
}

func (m *meteredBucket) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	m.rangeRead.Inc()
	return m.Bucket.NewRangeReader(ctx, key, offset, length)
}

func (m *meteredBucket) Attributes(ctx context.Context, key string) (store.Attributes, error) {
	m.attributes.Inc()
	return m.Bucket.Attributes(ctx, key)
}

func (m *meteredBucket) PutIfAbsent(ctx context.Context, key string, data []byte, md map[string]string) error {
	m.create.Inc()
	return m.Bucket.PutIfAbsent(ctx, key, data, md)
}

func (m *meteredBucket) Put(ctx context.Context, key string, data []byte, md map[string]string) error {
	m.put.Inc()
	return m.Bucket.Put(ctx, key, data, md)
}

func (m *meteredBucket) Copy(ctx context.Context, dst, src string) error {
	m.copy.Inc()
	return m.Bucket.Copy(ctx, dst, src)
}

func (m *meteredBucket) List(ctx context.Context, prefix string) iter.Seq2[store.Object, error] {
	return func(yield func(store.Object, error) bool) {
		m.list.Inc()
		n := 0
		for o, err := range m.Bucket.List(ctx, prefix) {
			if err == nil {
				if n > 0 && n%listPageSize == 0 {
					m.list.Inc()
				}
				n++
			}
			if !yield(o, err) {
				return
			}
		}
	}
}

func (m *meteredBucket) Delete(ctx context.Context, key string) error {
	m.delete.Inc()
	return m.Bucket.Delete(ctx, key)
}
