#!/bin/sh
# shardsim search as a user runs it, on a 2-node cluster and a small batch:
# the table, CSV and HDF5 come out; pipelines are searched when asked for;
# on 3 threads, and under `mpirun --oversubscribe -np 2` with 2 threads each,
# the output, the CSV and the HDF5 equal the serial run's byte for byte; a
# memory limit
# below every plan says "nothing fits" with the smallest plan's breakdown
# and exits 1; GPU counts the cluster cannot hold exit 2 with the reason.
set -eu
bin=$1
data=$(cd "$(dirname "$0")" && pwd)/data
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cd "$out"
# 128 sequences of 4096 tokens: 8 micro-batches per GPU without a pipeline.
batch=$data/training/seq4096-128-sequences.json
search="$bin/shardsim search --cluster dgx-a100-2node --model llama-7b --training $batch"
small="--micro-batch-sizes 1,2 --recompute none,full --buckets 1e9 --simulate 4"

$search --gpus 16 $small --threads 1 --csv serial.csv --h5 serial.h5 --explain 1 > serial.txt
grep -q "^# shardsim search: llama-7b" serial.txt
grep -q "^   1  " serial.txt
grep -q "^# Pareto front" serial.txt
grep -q "^# explain rank 1" serial.txt
test "$(head -1 serial.csv | cut -d, -f1-3)" = "index,plan,system"
test -s serial.h5

$search --gpus 16 $small --threads 3 --csv threads.csv --h5 threads.h5 --explain 1 > threads.txt
cmp serial.txt threads.txt
cmp serial.csv threads.csv
cmp serial.h5 threads.h5

timeout 300 mpirun --oversubscribe -np 2 $search --gpus 16 $small --threads 2 --csv mpi.csv --h5 mpi.h5 --explain 1 \
  > mpi.txt
cmp serial.txt mpi.txt
cmp serial.csv mpi.csv
cmp serial.h5 mpi.h5  # written seconds apart: no wall-clock stamps inside

$search --gpus 16 $small --json > ranked.json
grep -q '"ranked"' ranked.json

# Only the pipelines: Megatron-LM and ZeroPP layouts, ranked.
$search --gpus 16 $small --systems megatron,zero-pipeline --csv pipelines.csv > pipelines.txt
grep -q "^   1  megatron-t\|^   1  zero-pipeline-p" pipelines.txt
grep -q ",megatron," pipelines.csv
grep -q ",zero_pipeline," pipelines.csv
if grep -q ",zero3,\|,amsp," pipelines.csv; then exit 1; fi
code=0
$search --gpus 16 $small --systems megatron,zero3 > bad.txt 2> bad.err || code=$?
test "$code" = 2
grep -q "zero3" bad.err

code=0
$search --gpus 16 $small --mem-limit 1GiB --csv none.csv > none.txt || code=$?
test "$code" = 1
grep -q "nothing fits" none.txt
grep -q "optimizer_states" none.txt
test -s none.csv

for gpus in 12 24; do
  code=0
  $search --gpus $gpus $small > bad.txt 2> bad.err || code=$?
  test "$code" = 2
  test -s bad.err
  cat bad.err
done
grep -q "whole nodes\|1 to 16 GPUs" bad.err
echo "search CLI: serial, threaded and MPI outputs identical, exit codes 1 and 2 as documented"
