package alerts

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turnlog/turnlog/internal/testutil/versitygw"
)

// startManager runs the built `turnlog manager` as a cluster runs it,
// metrics on HTTPS behind the API server's authentication and
// authorization (--metrics-secure, the default), with the flags that make
// the alerts' conditions come within seconds rather than minutes: a short
// poll, deletion timeout and orphan sweep, runs given up after one
// failure, and a namespace reconcile rate of one a second. --store-timeout
// is short too, so that no look at a failing store holds one of the
// manager's few reconciles for long while the other triggers' Sessions
// wait their turn. The stores are file://, S3 endpoints that refuse
// connections, and a versitygw (h.gateway) the test kills and restarts;
// the manager's S3 credentials are the gateway's.
func (h *harness) startManager(t *testing.T) {
	t.Helper()
	h.storeDir = filepath.Join(h.dir, "store")
	if err := os.Mkdir(h.storeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	h.storeURL = "file://" + h.storeDir
	// Nothing listens on the address once freeAddr returns: connections
	// to the store are refused.
	refusing := func() string {
		return "s3://logs?region=us-east-1&use_path_style=true&disable_https=true&endpoint=" + url.QueryEscape("http://"+freeAddr(t))
	}
	h.gateway = versitygw.Start(t)
	stores := filepath.Join(h.dir, "stores")
	lines := fmt.Sprintf("default %s\n%s %s\n%s %s\n%s %s\n", h.storeURL, unreachableStore, refusing(), offlineStore, refusing(),
		gatewayStore, h.gateway.URL)
	if err := os.WriteFile(stores, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	h.managerAddr = freeAddr(t)
	h.started = time.Now()
	h.manager = startProcess(t, "turnlog manager", filepath.Join(h.dir, "manager.log"),
		[]string{"AWS_ACCESS_KEY_ID=" + h.gateway.AccessKey, "AWS_SECRET_ACCESS_KEY=" + h.gateway.SecretKey, "AWS_EC2_METADATA_DISABLED=true"},
		h.turnlog, "manager", "--kubeconfig="+h.cluster.kubeconfig,
		"--metrics-bind-address="+h.managerAddr, "--health-probe-bind-address=0",
		"--worker-mode=local", "--stores-file="+stores,
		"--poll-interval=2s", "--store-timeout=5s",
		"--worker-max-failures=1",
		"--deletion-timeout=5s", "--orphan-namespace="+nsManager, "--orphan-sweep-interval=2s",
		"--namespace-reconcile-rate=1")
}

// startPanickingController runs this test binary again as the panicking
// controller (panics_test.go).
func (h *harness) startPanickingController(t *testing.T) {
	t.Helper()
	h.panickerAddr = freeAddr(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h.panicker = startProcess(t, "the panicking controller", filepath.Join(h.dir, "panicking-controller.log"),
		[]string{panickingControllerEnv + "=" + h.panickerAddr, "KUBECONFIG=" + h.cluster.kubeconfig}, self)
}

// waitScraped waits until Prometheus scrapes the manager, the panicking
// controller and the shard's manager successfully: the doc's scrape
// config, the token and the reader binding work.
func (h *harness) waitScraped(t *testing.T) {
	t.Helper()
	eventually(t, 3*time.Minute, "Prometheus scrapes the manager, the panicking controller and the shard's manager", func() (bool, string) {
		h.manager.failIfExited(t)
		h.panicker.failIfExited(t)
		h.shardManager.failIfExited(t)
		var data struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := h.prom.api("/api/v1/targets", nil, &data); err != nil {
			return false, err.Error()
		}
		up := 0
		var states []string
		for _, target := range data.ActiveTargets {
			if target.Health == "up" {
				up++
			}
			states = append(states, fmt.Sprintf("%s %s %s", target.Labels["instance"], target.Health, target.LastError))
		}
		return up == 3 && len(data.ActiveTargets) == 3, "targets: " + strings.Join(states, "; ")
	})
}

// logScrapes logs, per target, the longest scrape and the failed ones
// since the manager started: on a slow machine a scrape over the 1s
// interval fails, which ends the target's series until the next one and
// holds back alerts that wait for their `for:`.
func (h *harness) logScrapes(t *testing.T) {
	t.Helper()
	window := promDuration(time.Since(h.started))
	longest := h.prom.query(t, "max_over_time(scrape_duration_seconds["+window+"])")
	failed := h.prom.query(t, "count_over_time(up["+window+"]) - sum_over_time(up["+window+"])")
	for _, l := range longest {
		for _, f := range failed {
			if f.Metric["instance"] == l.Metric["instance"] {
				t.Logf("scrapes of %s: longest %.3fs, %g failed", l.Metric["instance"], l.value(), f.value())
			}
		}
	}
}
