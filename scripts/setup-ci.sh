#!/bin/sh
# Extra Debian packages for the CI's hardening stages only (make sanitize-test, make
# fuzz-ci): clang 14 with its libFuzzer/sanitizer runtimes and OpenMP for clang, and
# Chromium and Firefox, which test_serve drives headless to use the server's web page
# (without them those cases print SKIPPED).
# Newcomers need only scripts/setup.sh. Uses sudo when not root. Safe to run again.
set -e
exec sh "$(dirname "$0")/apt-missing.sh" setup-ci clang-14 libclang-rt-14-dev libomp-14-dev chromium firefox-esr
