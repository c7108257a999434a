#!/bin/sh
# System packages fusegrad needs: a C compiler for the CPU device, and (for the test suite's VIZ page test)
# Debian's headless-capable Chromium. Safe to run more than once.
set -e
need=""
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1 && ! command -v clang >/dev/null 2>&1; then
  need="gcc libc6-dev"
fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  need="$need chromium"
fi
# OpenMPI for fusegrad.distributed (mpirun; mpicc and the headers come with libopenmpi-dev, mpi4py builds on them)
if ! command -v mpirun >/dev/null 2>&1 || ! command -v mpicc >/dev/null 2>&1; then
  need="$need openmpi-bin libopenmpi-dev"
fi
# OpenCL for the CL device: the ICD loader and PoCL (OpenCL on the CPU, so CI runs the CL tests without a GPU)
if [ ! -e /etc/OpenCL/vendors/pocl.icd ] || ! ldconfig -p 2>/dev/null | grep -q libOpenCL.so.1; then
  need="$need ocl-icd-libopencl1 pocl-opencl-icd"
fi
[ -z "$need" ] && exit 0
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q && $SUDO apt-get install -y -q $need
else
  echo "fusegrad needs a C compiler (gcc or clang) for the CPU device, Chromium for the VIZ page test and an OpenCL driver (PoCL) for the CL device; please install: $need" >&2
  exit 1
fi
