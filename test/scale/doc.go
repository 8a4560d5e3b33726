// Package scale measures what a turnlog manager costs at thousands of
// Sessions: memory, reconciles, API and object-store requests, time until
// every Session is Ready, the same after a restart, and how fast appends
// reach status. It starts a control plane (envtest's binaries), creates N
// Sessions with real logs, runs the built `turnlog manager` as a process of
// its own (so /proc gives its memory alone) and reads its metrics endpoint.
// With -scale.shards, config/shards' admission policy labels the Sessions,
// a manager per shard is measured alone, and the restart is one shard's
// while the others run on.
//
// TestFlood measures one namespace's flood against another's appends, and
// TestTurns what a host waits for on each turn in pod worker mode (append
// to stored transcript) and the Jobs and Pods the turns create, on the
// local cluster's process or container node. TestForks times SessionForks
// with the manager's --fork-prefix=reference and copy, on a file:// store
// and versitygw (fork to Succeeded, to the child Current) and what each
// child stores.
//
// They are measurements, not tests of behaviour: `make bench-scale`,
// `make bench-flood`, `make bench-turns` and `make bench-forks` run them,
// and docs/benchmarks.md records what the first three printed. Without
// their flags (-scale.n, -flood.rows, -turns.node, -forks.store) they do
// nothing. Apart from this comment the package is tests only.
package scale
