#!/usr/bin/env bash
# Installs what gradsync needs and is missing: Debian packages via apt-get (build, MPI, HDF5,
# analysis Python for /usr/bin/python3, the local Slurm and the network-namespace testbed).
# Idempotent: a second run installs nothing and takes a second.
#
#   scripts/install-deps.sh            # everything
#   GRADSYNC_DEPS=build scripts/install-deps.sh   # only what building needs
#   GRADSYNC_DEPS=torch scripts/install-deps.sh   # only the PyTorch venv (see below)
#   GRADSYNC_DEPS=all,torch scripts/install-deps.sh
# PyTorch (optional, for scripts/gradsync_torch): torch==$GRADSYNC_TORCH_VERSION (2.15.0) from
# PyPI into a venv at $GRADSYNC_TORCH_VENV (default <repo>/.venv-torch, git-ignored), made
# with /usr/bin/python3 -m venv --system-site-packages so Debian's h5py/numpy are visible.
# About 5.4 GB (the CUDA wheels come along; `import torch` needs them even on CPU) and
# about 2 minutes; skipped when that venv already imports that torch version. Then the
# recorder's native DDP hook is compiled once (gradsync_torch/native.py; about 30 s).
set -euo pipefail

build_pkgs=(g++ cmake make git pkg-config libopenmpi-dev openmpi-bin libhdf5-dev hdf5-tools
            libboost-program-options-dev libeigen3-dev libtomlplusplus-dev libgtest-dev
            libbenchmark-dev)
analysis_pkgs=(python3 python3-h5py python3-matplotlib python3-numpy)
cluster_pkgs=(slurm-wlm munge iproute2 util-linux procps)

torch_version="${GRADSYNC_TORCH_VERSION:-2.15.0}"
torch_venv="${GRADSYNC_TORCH_VENV:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv-torch}"
want_torch=0
wanted=()
IFS=',' read -r -a deps_kinds <<<"${GRADSYNC_DEPS:-all}"
for kind in "${deps_kinds[@]}"; do
  case "$kind" in
    build) wanted+=("${build_pkgs[@]}") ;;
    analysis) wanted+=("${analysis_pkgs[@]}") ;;
    all) wanted+=("${build_pkgs[@]}" "${analysis_pkgs[@]}" "${cluster_pkgs[@]}") ;;
    # g++, ninja-build and python3-dev build the recorder's native DDP hook (gradsync_torch/native.py).
    torch) want_torch=1; wanted+=(python3 python3-venv python3-h5py python3-numpy g++ ninja-build python3-dev) ;;
    *) echo "install-deps: GRADSYNC_DEPS must be a comma list of build, analysis, all, torch (got '$kind')" >&2; exit 2 ;;
  esac
done

# The PyTorch venv (after the Debian packages, which provide python3-venv and h5py).
install_torch() {
  if [[ -x "$torch_venv/bin/python" ]] &&
     "$torch_venv/bin/python" -c "import sys, torch, h5py; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
    echo "install-deps: torch $torch_version present in $torch_venv"
    build_native_hook
    return 0
  fi
  echo "install-deps: installing torch==$torch_version into $torch_venv (about 5.4 GB, about 2 minutes)"
  [[ -x "$torch_venv/bin/python" ]] || /usr/bin/python3 -m venv --system-site-packages "$torch_venv"
  "$torch_venv/bin/python" -m pip install -q "torch==$torch_version" >/tmp/gradsync-torch-pip.log 2>&1 || {
    echo "install-deps: pip install torch==$torch_version failed; last lines of /tmp/gradsync-torch-pip.log:" >&2
    tail -20 /tmp/gradsync-torch-pip.log >&2
    exit 1
  }
  echo "install-deps: torch $torch_version installed in $torch_venv"
  build_native_hook
}

# The recorder's C++ DDP hook, built once into $TORCH_EXTENSIONS_DIR (about 30 s; a no-op
# when built). Without it the recorder falls back to a Python hook, so a failure only warns.
build_native_hook() {
  GRADSYNC_TORCH_VENV="$torch_venv" "$(dirname "${BASH_SOURCE[0]}")/torch-python" -m gradsync_torch.native \
      >/tmp/gradsync-native-hook.log 2>&1 && tail -1 /tmp/gradsync-native-hook.log || {
    echo "install-deps: warning: the recorder's native hook did not build (it will record with a Python hook); last lines of /tmp/gradsync-native-hook.log:" >&2
    tail -5 /tmp/gradsync-native-hook.log >&2
  }
}

missing=()
for p in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#wanted[@]} packages present"
  ((want_torch)) && install_torch
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
((want_torch)) && install_torch
echo "install-deps: done"
