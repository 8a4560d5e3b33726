#!/usr/bin/env bash
# Installs what the local cluster's container node runs besides the kubelet
# (which hack/controlplane.sh builds): containerd, runc and the CNI plugins,
# from Debian's packages. Needs root, as the container node itself does.
# Packages already installed are left alone, so a warm run takes no time.
set -euo pipefail

packages=(containerd runc containernetworking-plugins)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
	echo "container node packages already installed: ${packages[*]}"
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "the container node needs ${missing[*]}: run as root, or: sudo apt-get install ${missing[*]}" >&2
	exit 1
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
