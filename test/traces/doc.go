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
// also after the Session's assembly is redone from the start. Apart from
// this comment the package is tests only.
package traces
