#!/usr/bin/env python3
"""Simulated FSDP2 steps against torchtitan's published runs on 64 A100s.

Regenerate with:  python3 results/torchtitan_fsdp2/compare.py [path/to/shardsim]

Reads published.csv: torchtitan's docs/performance.md as first published
(pytorch/torchtitan at 157a12c5, 2024-04-24; the tables were added in 395a5262):
Llama 3 8B and 70B and Llama 2 13B and 70B trained with FSDP2 alone (1D) on
64 A100 80GB GPUs, each row a local batch, a sequence length (Llama 3 8192,
Llama 2 4096) and an activation-checkpointing mode, with the words (tokens)
per second per GPU and the MFU that train.py logs. WPS is per GPU: train.py
divides the rank's tokens by the time and the model-parallel size (1), and
its MFU, 6 N + 12 l h q s FLOPs a token over 312 TFLOP/s (torchtitan/utils.py),
gives back the table's MFU from its WPS. The step time is local batch x
sequence / WPS.

What the code of that commit fixes, and shardsim runs (plan.json): fully_shard
on every block and the root, bf16 parameters, fp32 gradient reduction, eager
modules (compile = false; RMSNorm its fused Triton kernel), AdamW and gradient
clipping with foreach=True, selective layer checkpointing every second block
("full" with recompute_interval 2) and the selective op policy ("ops"),
flash attention (SDPA). Llama 2 13B is the llama-13b preset (the same shapes:
40 layers of 5120, 40 heads, SwiGLU 13824, vocabulary 32000).
What it assumes: the cluster, which the page does not describe; the
dgx-a100-1024 preset's first 64 GPUs (DGX A100 nodes, 8 HDR 200 Gb/s NICs
each). Communication is 1-5 % of these steps once hidden, so the fabric
matters little. Each row runs twice: on the bundled a100 profile, and on
calib/profiles/fitted/a100-fitted.json, whose kernel_time_factor
`shardsim calib fit-runs` fits (results/fit_runs; half of these rows are in
its fit set, and its leave-one-family-out error is the one that never saw
torchtitan).
"""
import csv
import json
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
from comparison_report import print_ratio_summary, run_json, write_comparison  # noqa: E402

GPUS = 64
CLUSTER = "dgx-a100-1024"
FITTED_PROFILE = ROOT / "calib" / "profiles" / "fitted" / "a100-fitted.json"
RECOMPUTE = {  # torchtitan's [activation_checkpoint] modes as shardsim's training fields
    "no": {"recompute": "none"},
    "selective layer": {"recompute": "full", "recompute_interval": 2},
    "selective op": {"recompute": "ops"},
    "full": {"recompute": "full"},
}


def training(row):
    """The training file of a row: bf16, flash attention, global batch 64 x local batch."""
    document = {"sequence_length": int(row["sequence_length"]), "micro_batch_size": int(row["local_batch"]),
                "global_batch": {"sequences": GPUS * int(row["local_batch"])}, "precision": "bf16",
                "fp8_gemms": False, "flash_attention": True}
    document.update(RECOMPUTE[row["activation_checkpointing"]])
    return document


def training_file(row):
    """Written under inputs/, where results/fit_runs names it too."""
    path = HERE / "inputs" / f"row{row['row']}-training.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(training(row), indent=1) + "\n")
    return path


def arguments(row):
    """`shardsim run` arguments of a row, paths relative to the repository root."""
    return ["--cluster", CLUSTER, "--gpus", str(GPUS), "--model", row["preset"],
            "--plan", str((HERE / "plan.json").relative_to(ROOT)),
            "--training", str(training_file(row).relative_to(ROOT))]


def published_step_seconds(row):
    return int(row["local_batch"]) * int(row["sequence_length"]) / float(row["published_wps"])


def simulate(shardsim, args, profile=None, plan=None):
    command = [shardsim, "run", *args, "--json"]
    if profile:
        command += ["--profile", str(profile)]
    if plan:
        command[command.index("--plan") + 1] = str(plan)
    return run_json(command, cwd=ROOT)


def main():
    shardsim = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build" / "shardsim")
    with (HERE / "published.csv").open() as f:
        published = list(csv.DictReader(f))
    # The same plan with Megatron-style fused kernels and bf16 reduction: what shardsim
    # predicted before it modelled the framework's own kernels.
    fused_plan = json.loads((HERE / "plan.json").read_text())
    fused_plan.update({"name": "torchtitan-fsdp2-as-fused", "kernels": "fused", "reduce_dtype": "training"})
    out_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        fused_plan_file = pathlib.Path(tmp) / "fused-plan.json"
        fused_plan_file.write_text(json.dumps(fused_plan))
        for row in published:
            out_rows.append(compare_row(shardsim, row, fused_plan_file))
    write_comparison(HERE / "comparison.csv", out_rows)
    print("\nthroughput ratio: predicted tokens per GPU per second over published (published step / predicted)")
    print_ratio_summary([("a100, fused kernels", [float(r["fused_throughput_ratio"]) for r in out_rows]),
                         ("a100 (bundled)", [float(r["throughput_ratio"]) for r in out_rows]),
                         ("a100-fitted", [float(r["fitted_throughput_ratio"]) for r in out_rows])])


def compare_row(shardsim, row, fused_plan_file):
    """One row on three models: fused kernels, the bundled profile, the fitted profile."""
    measured = published_step_seconds(row)
    args = arguments(row)  # writes the row's training file once
    fused_step = simulate(shardsim, args, plan=fused_plan_file)["step_seconds"]
    bundled = simulate(shardsim, args)
    fitted_step = simulate(shardsim, args, FITTED_PROFILE)["step_seconds"]
    step = bundled["step_seconds"]
    r = {
        "row": row["row"], "model": row["model"], "local_batch": row["local_batch"],
        "sequence_length": row["sequence_length"], "activation_checkpointing": row["activation_checkpointing"],
        "published_wps": row["published_wps"], "published_step_seconds": f"{measured:.3f}",
        "fused_step_seconds": f"{fused_step:.3f}", "fused_throughput_ratio": f"{measured / fused_step:.3f}",
        "predicted_step_seconds": f"{step:.3f}", "throughput_ratio": f"{measured / step:.3f}",
        "fitted_step_seconds": f"{fitted_step:.3f}", "fitted_throughput_ratio": f"{measured / fitted_step:.3f}",
        "peak_memory_gib": f"{bundled['peak_memory']['total_bytes'] / 2**30:.1f}",
        "fits": "yes" if bundled["fits"] else "no",
    }
    print(f"row {row['row']}  {row['model']:12} b{row['local_batch']} {row['activation_checkpointing']:15} "
          f"published {measured:6.2f} s  fused {fused_step:6.2f} s ({measured / fused_step:.3f})  "
          f"a100 {step:6.2f} s ({measured / step:.3f})  "
          f"a100-fitted {fitted_step:6.2f} s ({measured / fitted_step:.3f})  {r['peak_memory_gib']} GiB",
          flush=True)
    return r


if __name__ == "__main__":
    main()
