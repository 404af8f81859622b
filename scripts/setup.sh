#!/bin/sh
# Installs the Debian packages ditrun's build needs, when they are missing.
# Uses sudo when not root. Safe to run again.
set -e
PKGS="build-essential cmake pkg-config libjansson-dev libpng-dev libutf8proc-dev libpcre2-dev libopenblas-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "setup: all build dependencies present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "setup: installing$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
