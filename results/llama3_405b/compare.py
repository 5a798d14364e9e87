#!/usr/bin/env python3
"""Simulated Llama 3 405B pre-training against the MFU its paper reports.

Regenerate with:  python3 results/llama3_405b/compare.py [path/to/shardsim]

Reads published.csv: Table 4 of "The Llama 3 Herd of Models" (Llama Team,
AI @ Meta, arXiv:2407.21783), the three scaling configurations of Llama 3 405B
pre-training with their TFLOPs per GPU and BF16 MFU. Every row runs
`shardsim run` with the llama3-405b preset, plan.json (TP 8 with sequence
parallelism, PP 16 of 8 one-layer chunks with the embedding and the loss
counted as layers, the distributed optimizer for the paper's FSDP) and the
row's context parallelism, on the Meta RoCE cluster of meta-roce-h100-*.json
with the datasheet h100 profile. comparison.csv gets the predicted MFU
beside the published one. Both count model FLOPs the same way: 6 N plus
12 L H Q T per token (Chowdhery et al. 2023, whom the paper cites for MFU;
shardsim's model_flops_per_step), so their ratio is the ratio of throughputs.

Row 3's DP is 8: the table prints 4 in some copies, but 8 x 16 x 16 x 4 is
8,192 GPUs, not the 16,384 of the row, and 16 sequences of 131,072 tokens per
DP group make the 16M tokens per batch only with DP 8.

Attention: the h100 profile's own fused-attention figure is FlashAttention-3's
(Shah et al. 2024), published in July 2024, after this training ran; the
columns predicted_mfu_fa2 and ratio_fa2 time the same steps with
FlashAttention-2 (training config attention_kernel), at the third of an H100's
peak it runs at (the h100 profile's attention_kernels). The paper does not
say which kernel ran.

Memory: shardsim's activation model puts the fullest stage above 80 GiB in
every row (peak_memory_gib, fits). The paper fits 8K sequences without
activation checkpointing after freeing pipeline-stage inputs and outputs
early and with its own schedule (N tunable), neither of which shardsim
models. The step is therefore timed on a copy of the cluster whose GPUs hold
twice the memory; nothing else changes.
"""
import csv
import json
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def run(shardsim, command, *args):
    done = subprocess.run([shardsim, command, *args], capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"shardsim {command} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def job_args(plan_file, training_file):
    return ["--model", "llama3-405b", "--plan", str(plan_file), "--training", str(training_file)]


def main():
    shardsim = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build" / "shardsim")
    plan = json.loads((HERE / "plan.json").read_text())
    rows = list(csv.DictReader(open(HERE / "published.csv")))
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for row in rows:
            gpus, cp = int(row["gpus"]), int(row["cp"])
            cluster_file = HERE / f"meta-roce-h100-{gpus // 1024}k.json"
            row_plan = json.loads(json.dumps(plan))
            if cp > 1:
                row_plan["name"] += f"-cp{cp}"
                row_plan["model_parallel"]["context_parallel"] = cp
            plan_file = tmp / f"plan-{row['row']}.json"
            plan_file.write_text(json.dumps(row_plan))
            training = {
                "sequence_length": int(row["sequence_length"]), "micro_batch_size": 1,
                "global_batch": {"sequences": int(row["dp"]) * int(row["sequences_per_dp"])},
                "precision": "bf16", "fp8_gemms": False, "recompute": "none", "flash_attention": True}
            training_file = tmp / f"training-{row['row']}.json"
            training_file.write_text(json.dumps(training))
            fa2_training_file = tmp / f"training-{row['row']}-fa2.json"
            fa2_training_file.write_text(json.dumps({**training, "attention_kernel": "flash_attention_2"}))
            common = job_args(plan_file, training_file)

            memory = json.loads(run(shardsim, "memory", "--cluster", str(cluster_file), *common, "--json"))
            roomy = json.loads(cluster_file.read_text())
            roomy["node"]["gpu_memory_bytes"] *= 2
            roomy_file = tmp / f"cluster-{row['row']}.json"
            roomy_file.write_text(json.dumps(roomy))
            step = json.loads(run(shardsim, "run", "--cluster", str(roomy_file), *common, "--json"))
            fa2_job = job_args(plan_file, fa2_training_file)
            fa2_step = json.loads(run(shardsim, "run", "--cluster", str(roomy_file), *fa2_job, "--json"))
            peak_bytes = sum(memory["bytes"].values())
            published = float(row["bf16_mfu_percent"]) / 100
            predicted = step["mfu"]
            predicted_fa2 = fa2_step["mfu"]
            out.append({
                "row": row["row"], "gpus": gpus, "tp": row["tp"], "cp": cp, "pp": row["pp"], "dp": row["dp"],
                "sequence_length": row["sequence_length"], "sequences_per_dp": row["sequences_per_dp"],
                "published_mfu": f"{published:.2f}", "predicted_mfu": f"{predicted:.4f}",
                "ratio": f"{predicted / published:.3f}",
                "predicted_mfu_fa2": f"{predicted_fa2:.4f}", "ratio_fa2": f"{predicted_fa2 / published:.3f}",
                "published_tflops_per_gpu": row["tflops_per_gpu"],
                "predicted_tflops_per_gpu": f"{predicted * step['peak_flops_per_gpu'] / 1e12:.0f}",
                "predicted_step_seconds": f"{step['step_seconds']:.3f}",
                "peak_memory_gib": f"{peak_bytes / 2**30:.1f}", "fits_80_gib": "yes" if memory["fits"] else "no",
            })
            print(f"row {row['row']}: {gpus} GPUs, seq {row['sequence_length']}: MFU predicted "
                  f"{100 * predicted:.1f} % (FlashAttention-2: {100 * predicted_fa2:.1f} %) against "
                  f"{100 * published:.0f} % published ({predicted / published:.2f}x, {predicted_fa2 / published:.2f}x); "
                  f"fullest stage {peak_bytes / 2**30:.1f} GiB", flush=True)
    with open(HERE / "comparison.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(out[0].keys()), lineterminator="\n")
        writer.writeheader()
        writer.writerows(out)


if __name__ == "__main__":
    main()
