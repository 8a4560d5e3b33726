// Package alerts proves turnlog's alerts and dashboard in a real
// Prometheus: a control plane (envtest's kube-apiserver and etcd), the
// built `turnlog manager` serving its metrics as a cluster serves them
// (HTTPS, every scrape authenticated and authorized through the API
// server), and Debian's Prometheus scraping it with the scrape config
// docs/observability.md gives and evaluating the rules of
// config/prometheus/prometheus_rule.yaml, their expressions as shipped and
// only their `for:` shortened (but TurnlogStoreUnavailable's, whose timing
// the test proves).
//
// TestAlertsFireInPrometheus makes the condition of every alert true for
// real — an unreachable store, a store the manager does not have, a
// damaged log, a symbolic link in a file store, a degraded replay, a
// deleted Session whose log cannot be deleted, a flooded namespace, a
// panicking reconcile, a stopped manager — and reads each alert firing
// from Prometheus' API; it kills a store that worked (a versitygw), reads
// TurnlogStoreUnavailable firing within a minute, starts the store again
// and reads the alert resolved; then it runs every query of
// config/grafana/turnlog.json and checks that it returns data. It needs
// `make prometheus-server` (Debian's prometheus) and `make control-plane`,
// and takes a few minutes: the queue alert needs objects that waited over a
// minute. docs/observability.md, "The alerts, proven", says what each
// alert's trigger is. Apart from this comment the package is tests only.
package alerts
