#!/bin/sh
# `make configure`: runs CMake into BUILD when BUILD has no generated Makefile, which covers a
# fresh clone, a configure that failed (it leaves CMakeCache.txt and no Makefile), a deleted
# BUILD/Makefile and an empty or foreign CMakeCache.txt (from a copy of the tree moved
# elsewhere). A failed configure leaves no Makefile behind, so the next `make` tries again.
#   sh scripts/configure.sh BUILD [CMAKE_FLAGS...]
set -u
BUILD=$1
shift
SRC=$(pwd)
cache="$BUILD/CMakeCache.txt"
if [ -f "$cache" ]; then
  home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$cache")
  if [ -n "$home" ] && [ "$home" != "$SRC" ]; then
    echo "configure: $cache was made for $home; starting $BUILD afresh"
    rm -rf "$cache" "$BUILD/CMakeFiles"
  fi
fi
if cmake -S . -B "$BUILD" "$@"; then
  exit 0
fi
rm -f "$BUILD/Makefile"
echo "" >&2
echo "configure failed (the CMake messages above say why). A missing library usually means" >&2
echo "the build dependencies are not installed: run 'make setup', then 'make' again." >&2
exit 1
