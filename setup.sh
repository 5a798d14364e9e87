#!/usr/bin/env bash
# Installs shardsim's Debian dependencies when they are missing (the build's,
# and Debian's Jupyter for the notebooks the tests execute), then
# configures and builds into ./build. Safe to run repeatedly: installed
# packages are skipped and the build is incremental.
set -euo pipefail
cd "$(dirname "$0")"

packages=(cmake g++ make libboost-graph-dev nlohmann-json3-dev libeigen3-dev
          libcli11-dev catch2 libhdf5-dev libopenmpi-dev openmpi-bin libgd-dev
          jupyter-nbconvert python3-ipykernel python3-matplotlib python3-pandas python3-h5py)
missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]})); then
  echo "setup.sh: installing ${missing[*]}" >&2
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --parallel "$(nproc)"
