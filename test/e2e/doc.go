// Package e2e is turnlog's end-to-end suite: it drives the built `turnlog`
// binary and the real `kubectl` against a cluster whose worker pods really
// run, and asserts what a user sees — each busy namespace's worker pods
// Running, Session and SessionFork status, exported logs and Events.
//
// By default the suite starts everything itself: a local cluster from
// test/localcluster (its node runs pods as local processes), a file://
// object store and `turnlog manager` in pod worker mode. Given E2E_KUBECONFIG,
// E2E_IMAGE and E2E_STORE_URL it runs against a cluster where turnlog is
// already deployed instead; docs/e2e.md says how.
//
// Apart from this comment the package is tests only; run them with
// `make test-e2e` or `go test ./test/e2e/...`.
package e2e
