#!/bin/sh
# setup-debian.sh - install the Debian 12 packages dstk builds and tests with.
# Safe to run twice. Needs root (or sudo). The CUDA toolkit and NCCL are not
# Debian packages; configure uses them when /usr/local/cuda has them.
# shellcheck disable=SC2086  # $pkgs is the list of package names, split on purpose
set -eu
here=$(cd "$(dirname "$0")" && pwd)
pkgs=$(grep -v '^#' "$here/debian-packages.txt" | tr '\n' ' ')
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
missing=$(dpkg-query -W -f='${Package} ${Status}\n' $pkgs 2>/dev/null | awk '$NF != "installed" {print $1}')
# dpkg-query says nothing for packages it has never seen: compare counts too
known=$(dpkg-query -W -f='${Package}\n' $pkgs 2>/dev/null | wc -l)
if [ -n "$missing" ] || [ "$known" -ne "$(echo $pkgs | wc -w)" ]; then
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
fi
echo "setup-debian: all $(echo $pkgs | wc -w) packages installed"
