#!/bin/sh
# System packages fusegrad needs: a C compiler for the CPU device. Safe to run more than once.
set -e
if command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || command -v clang >/dev/null 2>&1; then
  exit 0
fi
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q && $SUDO apt-get install -y -q gcc libc6-dev
else
  echo "fusegrad needs a C compiler (gcc or clang) for the CPU device; please install one" >&2
  exit 1
fi
