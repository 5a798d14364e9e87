#!/usr/bin/env python3
"""Simulated peak memory against every published peak the project has found with its setup.

Regenerate with:  python3 results/memory/compare.py [path/to/shardsim]

published.csv: peaks a framework logged, each with what it measured
(torchtitan logs torch.cuda.max_memory_reserved(), torchtitan/metrics.py
at 9dec370: the caching allocator's reservation, cached free blocks
included). shardsim replays its simulated step's allocations through
PyTorch's caching allocator (workloads/memory/caching_allocator.h) and
reports that reservation beside the bytes allocated at the peak.
out_of_memory.csv: runs a page says fit or ran out of memory on its GPUs.

What each row runs: torchtitan at 9dec370 (the benchmark's commit), FSDP2 on
every block and the root, bf16 parameters, fp32 gradient reduction, eager
modules (compile off), cross_entropy(pred.float()), selective op
checkpointing (results/torchtitan_fsdp2/plan.json; the 157a12c5 rows use it
too). The allocator setting follows the launcher the repository documents
for the row's scale: run_llama_train.sh sets
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, multinode_trainer.slurm
does not; the page does not say which it used, so the other setting is
printed beside. The GPUs are H100 with 96 GB of HBM2e (96 GiB; the page),
on the h100-1024 preset's nodes and fabric (memory does not depend on them).
What shardsim does not model of that code, each small: the unfused RMSNorm's
fp32 intermediates kept by the final norm (norm_type "rmsnorm", about
0.5 GiB at 16,384 tokens), the root module's embedding kept gathered
through the step (about 0.9 GiB on 8 GPUs), the profiler.
"""
import csv
import json
import pathlib
import statistics
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
from comparison_report import run_json, write_comparison  # noqa: E402

PLAN = ROOT / "results" / "torchtitan_fsdp2" / "plan.json"
CLUSTERS = {96: "h100-1024", 80: "dgx-a100-1024"}  # GPU memory (GiB) -> the preset whose nodes it runs on
GIB = 2**30


def cluster_file(tmp, memory_gib):
    """The preset's cluster with the row's GPU memory."""
    preset = CLUSTERS[memory_gib]
    document = json.loads((ROOT / "topology" / "clusters" / f"{preset}.json").read_text())
    document["name"] = f"{preset}-{memory_gib}gib"
    document["node"]["gpu_memory_bytes"] = memory_gib * GIB
    path = pathlib.Path(tmp) / f"{document['name']}.json"
    path.write_text(json.dumps(document))
    return path


def plan_file(tmp, expandable):
    document = json.loads(PLAN.read_text())
    document["expandable_segments"] = expandable
    path = pathlib.Path(tmp) / f"plan-expandable-{expandable}.json"
    path.write_text(json.dumps(document))
    return path


def training_file(tmp, row):
    gpus, local_batch = int(row["gpus"]), int(row["local_batch"])
    document = {"sequence_length": int(row["sequence_length"]), "micro_batch_size": local_batch,
                "global_batch": {"sequences": gpus * local_batch}, "precision": "bf16", "fp8_gemms": False,
                "flash_attention": True, "recompute": {"selective op": "ops", "full": "full"}[row["activation_checkpointing"]]}
    path = pathlib.Path(tmp) / f"training-{row['row']}.json"
    path.write_text(json.dumps(document))
    return path


def simulate(shardsim, tmp, row, expandable):
    command = [shardsim, "run", "--cluster", str(cluster_file(tmp, int(row["gpu_memory_gib"]))),
               "--gpus", row["gpus"], "--model", row["preset"], "--plan", str(plan_file(tmp, expandable)),
               "--training", str(training_file(tmp, row)), "--json"]
    return run_json(command, cwd=ROOT)


def main():
    shardsim = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build" / "shardsim")
    rows, errors = [], []
    with tempfile.TemporaryDirectory() as tmp, (HERE / "published.csv").open() as f:
        print("row  model          GPUs  published  allocated  reserved (launcher's setting)  error   other setting")
        for row in csv.DictReader(f):
            expandable = row["expandable_segments"] == "true"
            result = simulate(shardsim, tmp, row, expandable)["peak_memory"]
            other = simulate(shardsim, tmp, row, not expandable)["peak_memory"]
            published = float(row["published_gib"])
            reserved, other_reserved = result["reserved_bytes"] / GIB, other["reserved_bytes"] / GIB
            error = reserved / published - 1
            errors.append(abs(error))
            rows.append({"row": row["row"], "model": row["model"], "gpus": row["gpus"],
                         "published_gib": row["published_gib"], "statistic": row["statistic"],
                         "expandable_segments": row["expandable_segments"],
                         "allocated_gib": f"{result['total_bytes'] / GIB:.2f}", "reserved_gib": f"{reserved:.2f}",
                         "error_percent": f"{100 * error:+.1f}",
                         "other_setting_reserved_gib": f"{other_reserved:.2f}",
                         "other_setting_error_percent": f"{100 * (other_reserved / published - 1):+.1f}"})
            print(f"{row['row']:>3}  {row['model']:13} {row['gpus']:>4}  {published:9.1f}  "
                  f"{result['total_bytes'] / GIB:9.2f}  {reserved:8.2f} (expandable {row['expandable_segments']:5})"
                  f"       {100 * error:+5.1f} %  {other_reserved:.2f} ({100 * (other_reserved / published - 1):+.1f} %)")
        print("\nrow  model          GPUs  published        shardsim")
        with (HERE / "out_of_memory.csv").open() as g:
            for row in csv.DictReader(g):
                result = simulate(shardsim, tmp, {**row, "expandable_segments": "false"}, False)
                fits = result["fits"] and not result["peak_memory"].get("reserved_out_of_memory", False)
                said = "fits" if fits else "out of memory"
                rows.append({"row": row["row"], "model": row["model"], "gpus": row["gpus"],
                             "published_gib": row["published"], "statistic": "fits or not",
                             "expandable_segments": "false",
                             "allocated_gib": f"{result['peak_memory']['total_bytes'] / GIB:.2f}",
                             "reserved_gib": f"{result['peak_memory'].get('reserved_bytes', 0) / GIB:.2f}",
                             "error_percent": "agrees" if said == row["published"] else "disagrees",
                             "other_setting_reserved_gib": "", "other_setting_error_percent": ""})
                print(f"{row['row']:>3}  {row['model']:13} {row['gpus']:>4}  {row['published']:15}  {said} "
                      f"({result['peak_memory']['total_bytes'] / GIB:.1f} GiB allocated)")
    write_comparison(HERE / "comparison.csv", rows)
    print(f"\nmedian |error| of the reserved peak: {100 * statistics.median(errors):.1f} % over {len(errors)} "
          f"published peaks; largest {100 * max(errors):.1f} %")


if __name__ == "__main__":
    main()
