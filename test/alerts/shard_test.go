package alerts

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TurnlogShardAbsent watches the managers started with --shard, whose
// metrics carry the label shard: a shard seen lately with no replica
// running its Session controller now. The built `turnlog manager
// --shard=alerts` runs beside the unsharded manager as another target of
// the scrape job, as a shard's manager would; no Session is labelled with
// its shard, so it reconciles nothing, and stopping it leaves the
// unsharded manager (and TurnlogManagerAbsent) alone.

// shardName is the shard of the shard's manager.
const shardName = "alerts"

// startShardManager runs the shard's manager, with the store and the
// worker mode of the unsharded one.
func (h *harness) startShardManager(t *testing.T) {
	t.Helper()
	h.shardAddr = freeAddr(t)
	h.shardManager = startProcess(t, "the shard's manager", filepath.Join(h.dir, "shard-manager.log"), nil,
		h.turnlog, "manager", "--kubeconfig="+h.cluster.kubeconfig, "--shard="+shardName,
		"--metrics-bind-address="+h.shardAddr, "--health-probe-bind-address=0",
		"--worker-mode=local", "--store-url="+h.storeURL, "--orphan-namespace=")
}

// stopShardManager stops the shard's manager once Prometheus has scraped
// its Session controller.
func (h *harness) stopShardManager(t *testing.T) {
	series := fmt.Sprintf(`controller_runtime_max_concurrent_reconciles{controller="session",shard=%q}`, shardName)
	eventually(t, 2*time.Minute, "the shard's Session controller scraped", func() (bool, string) {
		return len(h.prom.query(t, series)) > 0, "no sample of " + series
	})
	h.shardManager.stop()
}
