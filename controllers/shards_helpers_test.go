package controllers

import (
	"bytes"
	"context"
	"io"
	"iter"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
)

// shardReplica is one replica of a shard's manager running in the test's
// process, as `turnlog manager --shard=NAME --leader-elect
// --watch-namespace=...` runs on a cluster.
type shardReplica struct {
	shard, name string
	mgr         ctrl.Manager
	stop        func()
}

// leaseNamespace holds the shards' Leases, as the manager's own namespace
// does on a cluster.
const leaseNamespace = "turnlog-system"

// startShardReplica starts a replica of shard's manager watching
// namespaces, with its own view of the store (journaled as name), electing
// its shard's leader with short Lease times so that a standby takes over
// within seconds.
func startShardReplica(shard, name string, namespaces []string, j *storeJournal, stores *BucketCache) *shardReplica {
	GinkgoHelper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme.Scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		Cache:                   ShardCacheOptions(CacheOptions(namespaces...), shard),
		Controller:              config.Controller{SkipNameValidation: ptr.To(true)},
		LeaderElection:          true,
		LeaderElectionID:        LeaderElectionID(shard),
		LeaderElectionNamespace: leaseNamespace,
		LeaseDuration:           ptr.To(4 * time.Second),
		RenewDeadline:           ptr.To(3 * time.Second),
		RetryPeriod:             ptr.To(500 * time.Millisecond),
	})
	Expect(err).NotTo(HaveOccurred())
	mctx, cancel := context.WithCancel(ctx)
	journaled := journaledStores{BucketCache: stores, bucket: &journaledBucket{journal: j, shard: shard, replica: name}}
	journaled.bucket.Bucket, err = stores.buckets.Bucket(ctx, stores.Configured["default"].URL)
	Expect(err).NotTo(HaveOccurred())
	conf := Config{Stores: journaled, WorkerMode: WorkerModeLocal, PollInterval: time.Hour, Shard: shard}
	Expect(Setup(mctx, mgr, conf)).To(Succeed())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		// A replica stopped while it leads reports the lost election.
		if err := mgr.Start(mctx); err != nil {
			Expect(err).To(MatchError("leader election lost"))
		}
	}()
	return &shardReplica{shard: shard, name: name, mgr: mgr, stop: func() {
		cancel()
		<-done
	}}
}

// leads reports whether the replica has been elected its shard's leader.
func (r *shardReplica) leads() bool {
	select {
	case <-r.mgr.Elected():
		return true
	default:
		return false
	}
}

// journaledStores serves every Session from one bucket, through a replica's
// journaledBucket.
type journaledStores struct {
	*BucketCache
	bucket *journaledBucket
}

func (s journaledStores) Store(ctx context.Context, name string) (*SessionStore, error) {
	st, err := s.BucketCache.Store(ctx, name)
	if err != nil {
		return nil, err
	}
	st.Logs = sessionlog.New(s.bucket)
	return st, nil
}

// storeJournal records, in the order they happen, the store requests of
// every replica, and can hold one shard's writes under a Session's root
// until the replica gives them up.
type storeJournal struct {
	mu      sync.Mutex
	entries []journalEntry
	// held is the root whose writes the shard holdShard's replicas wait
	// on, until their context ends or release is closed.
	holdShard, held string
	release         chan struct{}
}

// journalEntry is one store request, or the end of a held one.
type journalEntry struct {
	shard, replica, op, key string
}

func (j *storeJournal) add(e journalEntry) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, e)
	return len(j.entries) - 1
}

// hold makes shard's writes under root wait until their context ends.
func (j *storeJournal) hold(shard, root string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.holdShard, j.held, j.release = shard, root, make(chan struct{})
}

// unhold lets held writes through, and holds no more.
func (j *storeJournal) unhold() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.release != nil {
		close(j.release)
	}
	j.holdShard, j.held, j.release = "", "", nil
}

// holding returns what a write of shard to key waits on, if it waits.
func (j *storeJournal) holding(shard, key string) (chan struct{}, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.release, j.held != "" && j.holdShard == shard && strings.HasPrefix(key, j.held)
}

// find returns the index of the first entry at or after from that
// matches, or -1.
func (j *storeJournal) find(from int, match func(journalEntry) bool) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := max(from, 0); i < len(j.entries); i++ {
		if match(j.entries[i]) {
			return i
		}
	}
	return -1
}

// last returns the index of the last entry that matches, or -1.
func (j *storeJournal) last(match func(journalEntry) bool) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := len(j.entries) - 1; i >= 0; i-- {
		if match(j.entries[i]) {
			return i
		}
	}
	return -1
}

// roots returns the Session roots (namespace/name/uid) each shard's
// replicas sent requests under.
func (j *storeJournal) roots() map[string]map[string]bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string]map[string]bool{}
	for _, e := range j.entries {
		parts := strings.SplitN(e.key, "/", 4)
		if len(parts) < 3 {
			continue
		}
		if out[e.shard] == nil {
			out[e.shard] = map[string]bool{}
		}
		out[e.shard][strings.Join(parts[:3], "/")] = true
	}
	return out
}

// journaledBucket records a replica's requests in its journal; its writes
// wait while the journal holds them.
type journaledBucket struct {
	store.Bucket
	journal        *storeJournal
	shard, replica string
}

func (b *journaledBucket) record(op, key string) {
	b.journal.add(journalEntry{shard: b.shard, replica: b.replica, op: op, key: key})
}

// wait holds a write while the journal says so, and records how the wait
// ended: "held-cancelled" when the replica gave the write up.
func (b *journaledBucket) wait(ctx context.Context, key string) error {
	release, held := b.journal.holding(b.shard, key)
	if !held {
		return nil
	}
	b.record("held", key)
	select {
	case <-ctx.Done():
		b.record("held-cancelled", key)
		return ctx.Err()
	case <-release:
		b.record("held-released", key)
		return nil
	}
}

func (b *journaledBucket) Get(ctx context.Context, key string) ([]byte, error) {
	b.record("get", key)
	return b.Bucket.Get(ctx, key)
}

func (b *journaledBucket) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	b.record("range-read", key)
	return b.Bucket.NewRangeReader(ctx, key, offset, length)
}

func (b *journaledBucket) Attributes(ctx context.Context, key string) (store.Attributes, error) {
	b.record("attributes", key)
	return b.Bucket.Attributes(ctx, key)
}

func (b *journaledBucket) PutIfAbsent(ctx context.Context, key string, data []byte, md map[string]string) error {
	b.record("create", key)
	if err := b.wait(ctx, key); err != nil {
		return err
	}
	return b.Bucket.PutIfAbsent(ctx, key, data, md)
}

func (b *journaledBucket) Put(ctx context.Context, key string, data []byte, md map[string]string) error {
	b.record("put", key)
	if err := b.wait(ctx, key); err != nil {
		return err
	}
	return b.Bucket.Put(ctx, key, data, md)
}

func (b *journaledBucket) Copy(ctx context.Context, dst, src string) error {
	b.record("copy", dst)
	b.record("copy-from", src)
	return b.Bucket.Copy(ctx, dst, src)
}

func (b *journaledBucket) List(ctx context.Context, prefix string) iter.Seq2[store.Object, error] {
	b.record("list", prefix)
	return b.Bucket.List(ctx, prefix)
}

func (b *journaledBucket) Delete(ctx context.Context, key string) error {
	b.record("delete", key)
	return b.Bucket.Delete(ctx, key)
}

// turnsOf splits a log into its turns, each ending with its turn/end
// event; the first holds session/start too.
func turnsOf(log []byte) [][]byte {
	var turns [][]byte
	start := 0
	lines := bytes.SplitAfter(log, []byte("\n"))
	at := 0
	for _, line := range lines {
		at += len(line)
		if bytes.Contains(line, []byte(`"type":"turn/end"`)) {
			turns = append(turns, log[start:at])
			start = at
		}
	}
	return turns
}

// eventsIn counts the events of a log fragment.
func eventsIn(fragment []byte) int64 {
	return int64(bytes.Count(fragment, []byte("\n")))
}
