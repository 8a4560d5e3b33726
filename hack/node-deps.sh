#!/usr/bin/env bash
# Installs what the local cluster's container node runs besides the kubelet
# (which hack/controlplane.sh builds): containerd, runc and the CNI plugins,
# from Debian's packages. Needs root, as the container node itself does.
set -euo pipefail
exec "$(dirname "$0")/debian-packages.sh" "the container node" containerd runc containernetworking-plugins
