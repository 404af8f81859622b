#!/bin/sh
# `make cross-test-arm64` (and CI): what building ditrun for 64-bit Arm Linux on an x86-64
# Debian machine and running its tests there under emulation needs: the arm64 cross compiler,
# qemu-user, and ditrun's libraries as arm64 packages (multiarch: adds the arm64 architecture
# to dpkg; the package sources stay as they are). Uses sudo when not root. Safe to run again.
set -e
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
ARM="libjansson-dev:arm64 libpng-dev:arm64 libutf8proc-dev:arm64 libpcre2-dev:arm64 libjpeg62-turbo-dev:arm64
libmicrohttpd-dev:arm64 libcurl4-openssl-dev:arm64"
PKGS="crossbuild-essential-arm64 qemu-user $ARM"
dpkg --print-foreign-architectures | grep -qx arm64 || { echo "setup-cross: adding the arm64 architecture to dpkg"; $SUDO dpkg --add-architecture arm64; }
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "setup-cross: the arm64 cross toolchain, qemu-user and the arm64 libraries are present"
  exit 0
fi
echo "setup-cross: installing$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-remove $missing
