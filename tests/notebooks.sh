#!/bin/sh
# Executes every notebook under notebooks/ top to bottom against this build
# (they call build/shardsim and assert the closed forms they show), and checks
# that the committed notebooks carry no outputs. Needs Debian's Jupyter
# (setup.sh installs it); without it the test reports itself skipped (77).
set -eu
source_dir=$1
build_dir=$2
nbconvert=/usr/bin/jupyter-nbconvert
if [ ! -x "$nbconvert" ] || ! /usr/bin/python3 -c "import ipykernel, matplotlib, pandas, h5py" 2>/dev/null; then
  echo "jupyter-nbconvert, python3-ipykernel, -matplotlib, -pandas or -h5py is missing: run ./setup.sh" >&2
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export SHARDSIM_ROOT="$source_dir" SHARDSIM_BUILD="$build_dir" MPLBACKEND=Agg PYDEVD_DISABLE_FILE_VALIDATION=1
for notebook in "$source_dir"/notebooks/*.ipynb; do
  /usr/bin/python3 - "$notebook" <<'PYTHON'
import sys
import nbformat
notebook = nbformat.read(sys.argv[1], as_version=4)
nbformat.validate(notebook)
with_outputs = [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code" and (cell.outputs or cell.execution_count)]
if with_outputs:
    sys.exit(f"{sys.argv[1]}: cells {with_outputs} carry outputs; commit notebooks cleared")
PYTHON
  start=$(date +%s)
  (cd "$source_dir/notebooks" &&
    "$nbconvert" --to notebook --execute --ExecutePreprocessor.timeout=600 --output-dir "$out" "$notebook" \
      > "$out/log.txt" 2>&1) || { cat "$out/log.txt" >&2; echo "$notebook failed" >&2; exit 1; }
  echo "$(basename "$notebook"): executed in $(( $(date +%s) - start )) s"
done
