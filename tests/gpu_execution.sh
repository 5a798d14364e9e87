#!/bin/sh
# The GPU backend of `shardsim exec`, built as build/shardsim-gpu-backend.so.
# Everywhere: the shardsim binary itself does not link CUDA, cuBLASLt or
# NCCL (only exec loads them, from the module). Without a GPU: --backend gpu
# exits 2 saying why, and the test reports itself skipped (77). With one: a
# 1-GPU run of a 2-layer LLaMA-7B-shaped stack, in one process without
# mpirun (rank_threads.h), writes a measured timeline that the executor has
# checked (every op once, causal), and compare reads it.
set -eu
bin=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$out"

if ldd "$bin/shardsim" | grep -E "libcudart|libcublas|libnccl"; then
  echo "shardsim links CUDA libraries; only the GPU backend module should" >&2
  exit 1
fi
[ -e "$bin/shardsim-gpu-backend.so" ] || { echo "no GPU backend module in $bin" >&2; exit 1; }

job="--cluster h200-1024 --model llama-7b --plan zero3 --gpus 1 --scale layers=2,micro_batches=2"
if ! "$bin/shardsim-devices" --require-gpu > devices.txt 2>&1; then
  status=0
  "$bin/shardsim" exec $job --backend gpu --steps 1 --warmup 0 > exec.txt 2>&1 || status=$?
  [ "$status" -eq 2 ] || { cat exec.txt >&2; echo "--backend gpu without a GPU: exit $status, expected 2" >&2; exit 1; }
  grep -q "no CUDA device is visible" exec.txt || { cat exec.txt >&2; exit 1; }
  echo "no GPU: --backend gpu refuses with exit 2; the GPU run is skipped"
  exit 77
fi

"$bin/shardsim" run $job --record-ranks all --h5 predicted.h5 > run.txt
timeout 300 "$bin/shardsim" exec $job --backend gpu --steps 3 --warmup 2 --h5 measured.h5 > exec.txt
grep -q "(gpu backend)" exec.txt
"$bin/shardsim" compare predicted.h5 measured.h5 --csv comparison.csv > compare.txt
awk -F, '$2 == "step time" && $3 > 0 && $4 > 0 { found = 1 } END { exit !found }' comparison.csv
cat compare.txt
