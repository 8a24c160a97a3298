#!/usr/bin/env bash
# Install what the project needs on a fresh Debian machine (idempotent; skips what is present).
# Rust comes from the machine's toolchain; C++ pieces and tools come from Debian.
set -euo pipefail
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v g++ >/dev/null 2>&1 || need+=(g++)
[ -f /usr/include/gloo/config.h ] || need+=(libgloo-dev)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
# Slurm (slurmctld, slurmd, slurm-client, munge) and OpenMPI (openmpi-bin) are installed by the
# suites that use them (scripts/test.d/28-slurm.sh, 29-mpirun.sh, 29b-pmix.sh), through apt_install in
# scripts/lib/suite.sh, so that a machine that never runs them gets no daemons' packages. PMIx
# (libpmix2) comes with openmpi-bin; 28-slurm.sh adds libpmix-dev, whose unversioned libpmix.so
# Slurm's mpi_pmix plugin loads for `srun --mpi=pmix` (mcore_init loads libpmix.so.2 itself).
if [ "${#need[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${need[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }
# rustfmt and clippy for the hygiene suite (scripts/test.d/05-hygiene.sh), from the registry rustup uses.
if command -v rustup >/dev/null 2>&1; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c" >/dev/null 2>&1 \
      || echo "setup: could not add the rustup component $c" >&2
  done
fi
