#!/bin/sh
# Extra Debian packages for the CI's hardening stages only (make sanitize-test, make
# fuzz-ci): clang 14 with its libFuzzer/sanitizer runtimes and OpenMP for clang, and
# Chromium and Firefox, which test_serve drives headless to use the server's web page
# (without them those cases print SKIPPED).
# Newcomers need only scripts/setup.sh. Uses sudo when not root. Safe to run again.
set -e
PKGS="clang-14 libclang-rt-14-dev libomp-14-dev chromium firefox-esr"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "setup-ci: all hardening dependencies present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "setup-ci: installing$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
