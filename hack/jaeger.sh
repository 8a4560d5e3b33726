#!/usr/bin/env bash
# Builds the pinned Jaeger (hack/jaeger, a Go module of its own) into the
# user cache directory, where internal/testutil/jaeger looks for it: the
# trace tests (test/traces, internal/telemetry) and `make dev JAEGER=1` run
# it. A cached binary of the pinned version is reused; a cold build takes
# about 8 minutes on 2 cores. --print-path prints where the binary is.
set -euo pipefail

VERSION=v1.75.0
BIN="${XDG_CACHE_HOME:-$HOME/.cache}/turnlog/bin/jaeger"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ "${1:-}" == "--print-path" ]]; then
	echo "$BIN"
	exit 0
fi

built_ok() {
	local out
	out="$(go version -m "$BIN" 2>/dev/null)" || return 1
	[[ "$out" == *"github.com/jaegertracing/jaeger	$VERSION"* ]]
}

if built_ok; then
	echo "jaeger $VERSION already in $BIN"
	exit 0
fi
echo "building jaeger $VERSION from Go modules into $BIN (about 8 minutes cold)"
mkdir -p "$(dirname "$BIN")"
cd "$HERE/jaeger"
GOFLAGS=-mod=readonly GOWORK=off go build -o "$BIN" github.com/jaegertracing/jaeger/cmd/jaeger
built_ok || { echo "built $BIN but it is not jaeger $VERSION" >&2; exit 1; }
echo "jaeger ready in $BIN"
