#!/usr/bin/env bash
# Writes the outputs of a fixed set of shardsim commands into OUT_DIR, one
# file per command (stdout, then the exit code), plus every file they write.
# Run it with the binary before and after a change that must not change
# behaviour, then `diff -r` the two folders:
#
#   tests/reference_outputs.sh build-before/shardsim /tmp/before
#   tests/reference_outputs.sh build/shardsim /tmp/after && diff -r /tmp/before /tmp/after
#
# About two minutes on two cores. Not a test itself: the reference is the
# binary before the change, not a stored copy.
set -uo pipefail
shardsim=$(readlink -f "$1")
out=$2
source_dir=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out/chakra"
cd "$out"

case_() {  # case_ NAME ARGS...: stdout and exit code into NAME.txt
  local name=$1
  shift
  "$shardsim" "$@" > "$name.txt" 2> "$name.stderr"
  echo "exit $?" >> "$name.txt"
}

a100=(--cluster dgx-a100-1024 --model llama-7b)
case_ run-zero3 run "${a100[@]}" --plan zero3 --trace zero3-trace.json --program zero3-program.json
case_ run-zero3-json run "${a100[@]}" --plan zero3 --json --gpus 64
case_ run-zero1 run "${a100[@]}" --plan zero1 --gpus 64
case_ run-zero2-analytical run "${a100[@]}" --plan zero2 --gpus 128 --network analytical
case_ run-zero0 run "${a100[@]}" --plan zero0 --gpus 16 --scale layers=8
case_ run-fsdp run "${a100[@]}" --plan fsdp-full-shard --gpus 64 --overlap none
case_ run-fsdp-hybrid run "${a100[@]}" --plan fsdp-hybrid-8 --gpus 64 --behaviour ideal
case_ run-mics run "${a100[@]}" --plan mics-16 --gpus 64
case_ run-zeropp run "${a100[@]}" --plan zeropp-hpz8 --gpus 64 --chakra chakra/zeropp
case_ run-zeropp-q run "${a100[@]}" --plan zeropp-hpz8-qwz-qgz --gpus 64
case_ run-amsp run --cluster a800-1024 --model llama-13b --plan amsp-llama13b --gpus 128
case_ run-megatron run --cluster dgx-a100-1024 --model llama-65b --plan megatron-tp4-pp4 --gpus 64
case_ run-megatron-interleaved run --cluster dgx-a100-1024 --model gpt3-175b --plan megatron-tp8-pp8-interleaved --gpus 512 --training seq2048-mbs1-4m-tokens --json
case_ run-megatron-tp-overlap run --cluster h100-1024 --model llama-65b --plan megatron-tp8-pp8-tp-overlap --gpus 128
case_ run-megatron-sp run --cluster h200-1024 --model llama3-8b --plan megatron-tp8-sp --gpus 16
case_ run-zero-pipeline run "${a100[@]}" --plan zero-pipeline-pp4 --gpus 32 --h5 zero-pipeline.h5
case_ run-zero-pipeline-zero1 run --cluster dgx-a100-1024 --model llama-65b --plan zero-pipeline-pp8-zero1 --gpus 128
case_ run-moe run --cluster dgx-a100-1024 --model mixtral-8x7b --plan zero1 --gpus 64 --expert-parallel 8
case_ run-moe-megatron run --cluster h100-1024 --model mixtral-8x7b --plan megatron-tp4-pp4 --gpus 128 --expert-parallel 4
case_ run-ulysses run "${a100[@]}" --plan zero3 --gpus 32 --ulysses 4
case_ run-oom run --cluster dgx-a100-1024 --model llama-65b --plan zero0 --gpus 8
case_ run-tokens run "${a100[@]}" --plan zero3 --gpus 64 --tokens 1T
case_ run-deepseek run --cluster h200-1024 --model deepseek-v3 --megatron deepseek-v3-1024gpu --gpus 1024 --network analytical
case_ run-megatron-launch run --cluster dgx-a100-1024 --model gpt3-175b --megatron gpt3-175b-1024gpu --gpus 1024 --network analytical
case_ run-placement run "${a100[@]}" --plan mics-16 --gpus 256 --placement scattered
case_ memory-zero3 memory "${a100[@]}" --plan zero3 --gpus 64 --json
case_ memory-megatron memory --cluster h100-1024 --model llama3-70b --plan megatron-tp8-pp8-interleaved --gpus 512
case_ memory-zero-pipeline memory "${a100[@]}" --plan zero-pipeline-pp4 --gpus 32
case_ collective-all collective --cluster dgx-a100-1024 --op all -b 8 -e 1G -f 64 --csv collective-all.csv
case_ collective-h200 collective --cluster h200-1024 --op all_reduce --gpus 64 --group all -b 1K -e 4G -f 16
case_ collective-nvls collective --cluster h100-8node --op all_reduce --gpus 8 --group intra --algo nvls
case_ collective-tree collective --cluster dgx-a100-1024 --op all_reduce --gpus 16 --group inter --algo tree --proto ll128
case_ collective-hier collective --cluster dgx-a100-8node --op all_reduce --algo hier --gpus 64 --group all
case_ collective-analytical collective --cluster a800-1024 --op reduce_scatter --network analytical -b 1M -e 1G -f 8
case_ collective-bad-algo collective --op all_to_all --algo ring
case_ search search --cluster dgx-a100-1024 --model llama-7b --gpus 64 --systems named,amsp --csv search.csv --json
case_ search-pipelines search --cluster dgx-a100-1024 --model llama-13b --gpus 32 --systems megatron,zero-pipeline --micro-batch-sizes 1 --recompute full
case_ search-moe search --cluster h100-1024 --model mixtral-8x7b --gpus 64 --systems named,megatron --micro-batch-sizes 1 --recompute full --top 5
case_ capacity capacity --cluster dgx-a100-1024 --model llama-7b --tokens 100B --gpus 16,64 --systems named --micro-batch-sizes 1
case_ presets presets
case_ calib-fit calib fit "$source_dir/calib/profiles/measured/cpu-2core-raw.json" --name cpu-2core -o fit.json
case_ calib-fit-h200 calib fit "$source_dir/calib/profiles/measured/h200-1gpu-raw.json" --base h200 --cluster h200-1024 --name h200-1gpu -o fit-h200.json
case_ calib-report calib report "$source_dir/calib/profiles/measured/cpu-2core.json" --png report.png
case_ calib-import calib import-nccl-tests "$source_dir/tests/data/nccl_tests/all_reduce_8gpu.log" -o imported.json
small=(--cluster cpu-4rank --model llama-7b --plan zero3 --scale layers=2,hidden=256,ffn=688,vocab=1024,seq=128,micro_batches=2 --record-ranks all)
case_ small-predicted run "${small[@]}" --profile "$source_dir/calib/profiles/measured/cpu-2core.json" --network table --h5 predicted.h5
case_ small-other run "${small[@]}" --profile "$source_dir/results/executor_cpu/cpu-4rank-profile.json" --network table --h5 other.h5
case_ compare compare predicted.h5 other.h5 --csv compare.csv --png compare.png --json
case_ bad-plan run "${a100[@]}" --plan /nonexistent.json

# The source tree's path is not part of the outputs.
find . -type f \( -name '*.txt' -o -name '*.json' -o -name '*.csv' -o -name '*.stderr' \) \
  -exec sed -i "s#$source_dir#SOURCE#g" {} +
