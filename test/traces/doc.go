// Package traces proves the Sessions' traces in a real Jaeger: Jaeger's
// own binary (built from hack/jaeger, internal/testutil/jaeger) receiving
// OTLP over HTTP from the controllers and their in-process workers
// (turnlogtest on envtest's kube-apiserver and etcd), a Session with tool
// calls and an aborted turn written through agenthost, and a fork of it.
//
// TestSessionsAsTraces reads back through Jaeger's query API one trace
// per turn with its invoke_agent, chat and execute_tool spans and their
// GenAI attributes, the fork's first turn linked to its source's cut
// turn, and, through the v3 API's raw traces (which show a span received
// twice, as Jaeger's other answers do not), every span received once,
// also after the Session's assembly is redone from the start.
//
// TestPodRunsJoinTheReconcileTrace runs the controllers in pod mode and a
// worker pod as a process of its own (`turnlog worker serve`, built from
// ./cmd/turnlog, with the command line and Secret of the worker
// Deployment the manager makes), and reads back each of the pod's run
// spans in the trace of the reconcile that submitted the run, the child of
// its work step. Apart from this comment the package is tests only.
package traces
