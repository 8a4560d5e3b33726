package controllers

import (
	"strings"
	"testing"
	"time"
)

// TestConfigDefaults: zero fields take their defaults, the Limits too; a
// negative one is refused by name.
func TestConfigDefaults(t *testing.T) {
	c, err := Config{PollInterval: time.Second, StoreTimeout: time.Minute}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.WorkerMaxFailures != DefaultWorkerMaxFailures || c.DeletionTimeout != DefaultDeletionTimeout ||
		c.ForkCopyTimeout != DefaultForkCopyTimeout || c.ReconcileDeadline != DefaultReconcileDeadline ||
		c.OrphanSweepInterval != DefaultOrphanSweepInterval || c.Limits.ConcurrentReconciles != DefaultConcurrentReconciles {
		t.Errorf("defaults: %+v", c)
	}
	if c.StoreTimeout != time.Minute {
		t.Errorf("store timeout %s, want the minute given", c.StoreTimeout)
	}
	for _, bad := range []struct {
		c    Config
		want string
	}{
		{Config{}, "poll interval must be positive"},
		{Config{PollInterval: time.Minute, MaxPollInterval: time.Second}, "max poll interval 1s is shorter"},
		{Config{PollInterval: time.Second, ForkCopyTimeout: -time.Second}, "fork copy timeout must not be negative"},
		{Config{PollInterval: time.Second, OrphanSweepInterval: -time.Second}, "orphan sweep interval must not be negative"},
		{Config{PollInterval: time.Second, Limits: Limits{LocalWorkerRuns: -1}}, "local worker runs must not be negative"},
	} {
		if _, err := bad.c.withDefaults(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: error %v, want %q", bad.c, err, bad.want)
		}
	}
}
