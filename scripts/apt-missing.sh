#!/bin/sh
# Installs those of the Debian packages given after the label that are not installed yet
# (apt-get, with sudo when not root; --no-remove, so an install never takes a package away),
# saying what it does under the label. Shared by setup-ci.sh and setup-cross.sh.
set -e
label=$1
shift
missing=""
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "$label: all present ($*)"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "$label: installing$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-remove $missing
