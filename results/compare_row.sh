#!/bin/sh
# One comparison of the executor scripts (results/executor_*/): `shardsim
# compare` of WORK/NAME-predicted.h5 with WORK/NAME-measured.h5, written to
# OUT.csv, OUT.png and OUT.txt, and one summary row printed:
#   LABEL,predicted,measured,error of the step time,predicted,measured,error of the GEMMs
#   sh results/compare_row.sh BIN WORK NAME OUT LABEL
set -eu
bin=$1 work=$2 name=$3 out=$4 label=$5
(cd "$work" && "$bin/shardsim" compare "$name-predicted.h5" "$name-measured.h5" --csv "$out.csv" --png "$out.png" \
  > "$out.txt")
awk -F, -v label="$label" '
  $2 == "step time" { step = $3 "," $4 "," $5 }
  $2 == "gemm" { gemm = $3 "," $4 "," $5 }
  END { print label "," step "," gemm }' "$out.csv"
