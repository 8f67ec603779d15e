#!/usr/bin/env bash
# Installs what gradsync needs and is missing: Debian packages via apt-get (build, MPI, HDF5,
# analysis Python for /usr/bin/python3, the local Slurm and the network-namespace testbed).
# Idempotent: a second run installs nothing and takes a second.
#
#   scripts/install-deps.sh            # everything
#   GRADSYNC_DEPS=build scripts/install-deps.sh   # only what building needs
set -euo pipefail

build_pkgs=(g++ cmake make git pkg-config libopenmpi-dev openmpi-bin libhdf5-dev hdf5-tools
            libboost-program-options-dev libeigen3-dev libtomlplusplus-dev libgtest-dev
            libbenchmark-dev)
analysis_pkgs=(python3 python3-h5py python3-matplotlib python3-numpy)
cluster_pkgs=(slurm-wlm munge iproute2 util-linux procps)

case "${GRADSYNC_DEPS:-all}" in
  build) wanted=("${build_pkgs[@]}") ;;
  analysis) wanted=("${analysis_pkgs[@]}") ;;
  all) wanted=("${build_pkgs[@]}" "${analysis_pkgs[@]}" "${cluster_pkgs[@]}") ;;
  *) echo "install-deps: GRADSYNC_DEPS must be build, analysis or all" >&2; exit 2 ;;
esac

missing=()
for p in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#wanted[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Package scripts may try to start services (munge, slurm); in containers without an init
# system that is refused harmlessly — gradsync starts what it needs itself.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/gradsync-apt.log 2>&1 || {
  echo "install-deps: apt-get failed; last lines of /tmp/gradsync-apt.log:" >&2
  tail -20 /tmp/gradsync-apt.log >&2
  exit 1
}
echo "install-deps: done"
