#!/usr/bin/env bash
# Packs shardsim's built binaries with the shared libraries they load into
# one archive that runs on a machine with none of the build's dependencies:
# a lent GPU machine (/work/.library/device) has CUDA and NCCL but no
# Boost, HDF5, Open MPI or libgd, and nothing can be installed there.
#
#   calib/portable/make_bundle.sh [OUT_DIR]     (default .gpu-bundle, ignored by git)
#
# Writes OUT_DIR/shardsim-bundle.tar.gz:
#   bin/   shardsim, shardsim-probe, shardsim-devices, shardsim-gpu-backend.so
#   lib/   every library they load except glibc's and CUDA's (libcudart,
#          cuBLAS(Lt), NCCL: the target's own, which match its driver)
#   cxx/   libstdc++ and libgcc_s, for a target whose own are older
# The binaries start MPI only under mpirun, so a single-machine GPU run
# needs Open MPI's libraries but none of its plugins or launcher.
# calib/portable/run_bundle.sh unpacks and runs it there.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.gpu-bundle}

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --parallel "$(nproc)" --target shardsim shardsim-probe shardsim-devices shardsim_gpu_backend

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/cxx"
binaries=(build/shardsim build/shardsim-probe build/shardsim-devices build/shardsim-gpu-backend.so)
cp "${binaries[@]}" "$stage/bin/"

# The target's glibc and CUDA stand in for these; everything else travels.
from_target='/(ld-linux[^/]*|lib(c|m|dl|pthread|rt|resolv|util)\.so[^/]*|libcudart[^/]*|libcublas[^/]*|libnccl[^/]*)$'
ldd "${binaries[@]}" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u | grep -Ev "$from_target" |
  while read -r library; do
    case $(basename "$library") in
      libstdc++.so.*|libgcc_s.so.*) cp -L "$library" "$stage/cxx/" ;;
      *) cp -L "$library" "$stage/lib/" ;;
    esac
  done
if ldd "${binaries[@]}" | grep -q "not found"; then
  echo "make_bundle.sh: a library the binaries need is missing here:" >&2
  ldd "${binaries[@]}" | grep "not found" >&2
  exit 1
fi
git rev-parse HEAD > "$stage/commit"

mkdir -p "$out"
tar -C "$stage" -czf "$out/shardsim-bundle.tar.gz.tmp" .
mv "$out/shardsim-bundle.tar.gz.tmp" "$out/shardsim-bundle.tar.gz"
echo "make_bundle.sh: $out/shardsim-bundle.tar.gz ($(du -h "$out/shardsim-bundle.tar.gz" | cut -f1)," \
     "$(ls "$stage/lib" | wc -l) libraries, commit $(cut -c1-7 "$stage/commit"))"
