#!/usr/bin/python3
"""Every field of the bundled job inputs, broken one at a time.

For a cluster, two models (LLaMA-7B; a small one with latent attention and
MoE layers), three plans (ZeRO-3, Megatron-LM, and Megatron-LM with its
experts split, run on the MoE model) and a training config, each field in turn is
set to a value of the wrong sign, type or size, or deleted, and `shardsim run`
is started on the result. What it must do: run (exit 0, one JSON object on
stdout), report the plan out of memory (exit 1), or refuse the input (exit 2)
with one line that names the broken file; never crash, hang or call its own
failure an internal error.

    python3 tests/input_mutations.py SOURCE_DIR BUILD_DIR
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

MUTATIONS = [-1, 0, 1e300, "x", None, [], "DELETE"]
SKIPPED_KEYS = {"sources", "source", "notes", "name"}  # free text


def fields(document, path=()):
    """Paths to every value under `document`, containers included."""
    if isinstance(document, dict):
        items = document.items()
    elif isinstance(document, list):
        items = enumerate(document)
    else:
        return
    for key, value in items:
        if key in SKIPPED_KEYS:
            continue
        yield path + (key,)
        yield from fields(value, path + (key,))


def mutated(document, path, value):
    copied = copy.deepcopy(document)
    parent = copied
    for key in path[:-1]:
        parent = parent[key]
    if value == "DELETE":
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return copied


def main():
    source, build = sys.argv[1], sys.argv[2]
    binary = os.path.join(build, "shardsim")
    inputs = {
        "cluster": os.path.join(source, "topology/clusters/dgx-a100-2node.json"),
        "model": os.path.join(source, "workloads/models/llama-7b.json"),
        "plan": os.path.join(source, "workloads/plans/zero3.json"),
        "training": os.path.join(source, "tests/data/training/seq4096-128-sequences.json"),
    }
    moe_model = os.path.join(source, "tests/data/models/small-mla-moe.json")
    cases = [(kind, inputs[kind], {}) for kind in inputs]  # (what is broken, its file, the other inputs changed)
    cases.append(("model", moe_model, {}))
    cases.append(("plan", os.path.join(source, "workloads/plans/megatron-tp4-pp4.json"), {}))
    cases.append(("plan", os.path.join(source, "tests/data/plans/megatron-pp2-ep4.json"), {"model": moe_model}))
    failures = []
    runs = 0
    with tempfile.TemporaryDirectory() as scratch:
        for kind, original, others in cases:
            with open(original) as text:
                document = json.load(text)
            broken = os.path.join(scratch, "broken-" + os.path.basename(original))
            for path in fields(document):
                for value in MUTATIONS:
                    with open(broken, "w") as out:
                        json.dump(mutated(document, path, value), out)
                    files = dict(inputs, **others, **{kind: broken})
                    command = [binary, "run", "--json"] + [a for k in files for a in ("--" + k, files[k])]
                    what = f"{os.path.basename(original)}: {'.'.join(map(str, path))} = {value!r}"
                    runs += 1
                    try:
                        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
                    except subprocess.TimeoutExpired:
                        failures.append(f"{what}: still running after 120 s")
                        continue
                    error = done.stderr.strip()
                    if done.returncode == 0:
                        try:
                            json.loads(done.stdout)
                        except ValueError:
                            failures.append(f"{what}: exit 0 without one JSON object on stdout")
                    elif done.returncode == 2:
                        if broken not in error or "internal error" in error:
                            failures.append(f"{what}: exit 2 without naming {broken}: {error[-300:]}")
                    elif done.returncode != 1:
                        failures.append(f"{what}: exit {done.returncode}: {error[-300:]}")
    for failure in failures:
        print(failure)
    print(f"{runs} runs on broken inputs, {len(failures)} handled wrongly")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
