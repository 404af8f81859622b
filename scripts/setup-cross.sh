#!/bin/sh
# `make cross-test-arm64` (and CI): what building ditrun for 64-bit Arm Linux on an x86-64
# Debian machine and running its tests there under emulation needs: the arm64 cross compiler,
# qemu-user, and ditrun's libraries as arm64 packages (multiarch: adds the arm64 architecture
# to dpkg; the package sources stay as they are; libgomp1:arm64 is the OpenMP runtime the
# emulated binaries load: the cross toolchain's copy lies outside their library path). Uses sudo when not root. Safe to run again.
set -e
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
dpkg --print-foreign-architectures | grep -qx arm64 || { echo "setup-cross: adding the arm64 architecture to dpkg"; $SUDO dpkg --add-architecture arm64; }
exec sh "$(dirname "$0")/apt-missing.sh" setup-cross crossbuild-essential-arm64 qemu-user libjansson-dev:arm64 \
  libpng-dev:arm64 libutf8proc-dev:arm64 libpcre2-dev:arm64 libjpeg62-turbo-dev:arm64 libmicrohttpd-dev:arm64 \
  libcurl4-openssl-dev:arm64 libgomp1:arm64
