// Package scale measures what a turnlog manager costs at thousands of
// Sessions: memory, reconciles, API and object-store requests, time until
// every Session is Ready, the same after a restart, and how fast appends
// reach status. It starts a control plane (envtest's binaries), creates N
// Sessions with real logs, runs the built `turnlog manager` as a process of
// its own (so /proc gives its memory alone) and reads its metrics endpoint.
//
// It is a measurement, not a test of behaviour: `make bench-scale` runs it
// and docs/benchmarks.md records what it printed. Without -scale.n it does
// nothing. Apart from this comment the package is tests only.
package scale
