#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl and the kubelet from Go modules (hack/controlplane) and installs
# them where setup-envtest and controller-runtime's envtest look for them. A
# cached, correctly versioned install is reused, binary by binary: a missing
# kubelet alone does not rebuild the other five. A cold build takes ~10-12
# minutes, the kubelet alone a few more.
set -euo pipefail

K8S_VERSION=1.37.2
ETCD_VERSION=3.7.0
ENVTEST_ROOT="${ENVTEST_ROOT:-$HOME/.local/share/kubebuilder-envtest}"
BIN_DIR="${CONTROL_PLANE_DIR:-$ENVTEST_ROOT/k8s/$K8S_VERSION-linux-amd64}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# reports prints a binary's version output; it is captured whole before
# matching because `grep -q` under pipefail can fail a pipeline by closing it
# early (SIGPIPE) and trigger a needless rebuild.
reports() {
	local want="$1"; shift
	local out
	out="$("$@" 2>/dev/null)" || return 1
	[[ "$out" == *"$want"* ]]
}

installed_ok() {
	local b
	for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
		[[ -x "$BIN_DIR/$b" ]] || return 1
	done
	reports "Kubernetes v$K8S_VERSION" "$BIN_DIR/kube-apiserver" --version || return 1
	reports "Kubernetes v$K8S_VERSION" "$BIN_DIR/kube-controller-manager" --version || return 1
	reports "Kubernetes v$K8S_VERSION" "$BIN_DIR/kube-scheduler" --version || return 1
	reports "Client Version: v$K8S_VERSION" "$BIN_DIR/kubectl" version --client || return 1
	reports "etcd Version: $ETCD_VERSION" "$BIN_DIR/etcd" --version || return 1
}

kubelet_ok() {
	[[ -x "$BIN_DIR/kubelet" ]] && reports "Kubernetes v$K8S_VERSION" "$BIN_DIR/kubelet" --version
}

if [[ "${1:-}" == "--print-dir" ]]; then
	echo "$BIN_DIR"
	exit 0
fi

pkgs=()
if installed_ok; then
	echo "control plane v$K8S_VERSION (etcd $ETCD_VERSION) already in $BIN_DIR"
else
	pkgs+=(./etcd ./kube-apiserver ./kube-controller-manager ./kube-scheduler ./kubectl)
fi
if kubelet_ok; then
	echo "kubelet v$K8S_VERSION already in $BIN_DIR"
else
	pkgs+=(./kubelet)
fi
if [[ ${#pkgs[@]} -eq 0 ]]; then
	exit 0
fi

echo "building ${pkgs[*]} v$K8S_VERSION from Go modules into $BIN_DIR"
echo "a cold build of all six takes about 9-15 minutes on 2 cores; later runs reuse it"
mkdir -p "$BIN_DIR"
major=${K8S_VERSION%%.*}
minor=${K8S_VERSION#*.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean"
done
cd "$HERE/controlplane"
start=$(date +%s)
# One go build for all of them shares compilation of the common packages.
go build -ldflags "$ldflags" -o "$BIN_DIR/" "${pkgs[@]}"
if ! installed_ok || ! kubelet_ok; then
	echo "control plane built but its versions are not v$K8S_VERSION / etcd $ETCD_VERSION" >&2
	exit 1
fi
echo "control plane ready in $BIN_DIR ($(( $(date +%s) - start ))s)"
