#!/usr/bin/env bash
# Installs Debian packages a make target needs when they are missing:
#   hack/debian-packages.sh "WHO NEEDS THEM" PACKAGE...
# Needs root (apt-get). Packages already installed are left alone, so a
# warm run takes no time.
set -euo pipefail

who=$1
shift
packages=("$@")
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
	echo "$who: packages already installed: ${packages[*]}"
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "$who needs ${missing[*]}: run as root, or: sudo apt-get install ${missing[*]}" >&2
	exit 1
fi
echo "$who: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
