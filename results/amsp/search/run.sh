#!/bin/sh
# Planner against search (issue 5): for each AMSP scenario at 64 and 1024
# GPUs of the A800 cluster, the plan `shardsim search` picks next to AMSP's
# published factors run under the same cluster, profile and batch. The search
# walks the data-parallel systems AMSP compares with (--systems named,amsp).
# Regenerate from the repository root: sh results/amsp/search/run.sh
# Writes results/amsp/search/{summary.csv, <model>-<gpus>.txt (table and --explain 1),
# <model>-<gpus>.csv (every candidate), <model>-<gpus>.published.json (the published plan's run)}.
set -eu
here=$(dirname "$0")
bin=${SHARDSIM:-./build/shardsim}
for model in llama-7b llama-13b llama-30b; do
  case $model in
    llama-7b) plan=amsp-llama7b; training=seq4096-mbs1-4m-tokens ;;
    llama-13b) plan=amsp-llama13b; training=seq4096-mbs1-4m-tokens ;;
    llama-30b) plan=amsp-llama30b; training=seq4096-mbs1-4m-tokens-full-recompute ;;
  esac
  for gpus in 64 1024; do
    name="$model-$gpus"
    "$bin" search --cluster a800-1024 --model $model --gpus $gpus --systems named,amsp --csv "$here/$name.csv" --explain 1 > "$here/$name.txt"
    "$bin" run --cluster a800-1024 --model $model --plan $plan --training $training --gpus $gpus --json > "$here/$name.published.json"
  done
done
python3 "$here/summarize.py" "$here" > "$here/summary.csv.tmp"
mv "$here/summary.csv.tmp" "$here/summary.csv"
cat "$here/summary.csv"
