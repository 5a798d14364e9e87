#!/usr/bin/env python3
"""Simulated AMSP experiments against the throughputs the AMSP paper measured.

Regenerate with:  python3 results/amsp/compare.py [path/to/shardsim]

Reads published.csv: every end-to-end number of "AMSP: Reducing Communication
Overhead of ZeRO for Efficient LLM Training" (Chen et al., arXiv:2311.00257v2)
that its text and tables state, not read off a plot: the MFU of ZeRO-1,
ZeRO-3, MiCS, ZeRO++ and AMSP at 8 and 1024 GPUs (sections I, III and VI-B),
and Table V, the overlap ablation on 64 GPUs with 1, 2, 4 and 8 micro-batches
per step, in tokens per GPU per second (TGS) and MFU. Every row runs
`shardsim run` on the a800-1024 cluster with the datasheet a800 profile, in
the paper's setup (section VI-A): sequence 4096, micro-batch 1, bf16, flash
attention, full recompute for LLaMA-30B only; 4 M tokens per step (one
micro-batch per GPU at 1024 GPUs) except Table V, whose step has the row's
micro-batches. The DeepSpeed baselines run as implemented with their overlaps
on; AMSP's end-to-end runs have its broadcast overlap off, as section VI-A
says the paper ran them. Output: comparison.csv.

Throughput is compared as TGS, the measured quantity. Where the paper gives
only MFU, its TGS is MFU x 312 TFLOP/s over the paper's FLOPs per token, taken
from Table V (MFU x peak / TGS, averaged over the model's rows): its LLaMA-30B
count is about 15 % below Megatron-LM's formula that shardsim and the paper's
7B and 13B rows use, so its 30B MFUs cannot be compared with shardsim's
directly. Nothing in shardsim was fitted to these rows.
"""
import csv
import json
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from comparison_report import print_ratio_summary, run_json, write_comparison  # noqa: E402
PEAK_FLOPS = 312e12  # A800 dense bf16, as the paper's MFU uses
SEQUENCE = 4096


def training(model, micro_batches, gpus):
    return {
        "sequence_length": SEQUENCE, "micro_batch_size": 1,
        "global_batch": {"sequences": micro_batches * gpus}, "precision": "bf16", "fp8_gemms": False,
        "recompute": "full" if model == "llama-30b" else "none", "flash_attention": True,
    }


def simulate(shardsim, row, tmp):
    config = tmp / "training.json"
    config.write_text(json.dumps(training(row["model"], int(row["micro_batches"]), int(row["gpus"]))))
    command = [shardsim, "run", "--cluster", "a800-1024", "--gpus", row["gpus"], "--model", row["model"],
               "--plan", row["plan"], "--training", str(config), "--overlap", row["overlap"], "--json"]
    return run_json(command)


def paper_flops_per_token(published):
    """The FLOPs per token behind the paper's MFU, from Table V's pairs."""
    per_model = {}
    for row in published:
        if row["published_tgs"]:
            flops = float(row["published_mfu"]) * PEAK_FLOPS / float(row["published_tgs"])
            per_model.setdefault(row["model"], []).append(flops)
    return {model: sum(v) / len(v) for model, v in per_model.items()}


def main():
    shardsim = sys.argv[1] if len(sys.argv) > 1 else str(HERE.parent.parent / "build" / "shardsim")
    with (HERE / "published.csv").open() as f:
        published = list(csv.DictReader(f))
    flops_per_token = paper_flops_per_token(published)
    out_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in published:
            result = simulate(shardsim, row, pathlib.Path(tmp))
            fits = result["fits"]
            tgs_published = (float(row["published_tgs"]) if row["published_tgs"] else
                             float(row["published_mfu"]) * PEAK_FLOPS / flops_per_token[row["model"]])
            tgs = result["tokens_per_gpu_per_second"] if fits else None
            out_rows.append({
                "where": row["where"], "model": row["model"], "plan": row["plan"], "gpus": row["gpus"],
                "micro_batches": row["micro_batches"], "overlap": row["overlap"],
                "published_mfu": row["published_mfu"],
                "published_tgs": f"{tgs_published:.0f}",
                "published_tgs_from_mfu": "no" if row["published_tgs"] else "yes",
                "predicted_mfu": f"{result['mfu']:.3f}" if fits else "",
                "predicted_tgs": f"{tgs:.0f}" if fits else "",
                "ratio": f"{tgs / tgs_published:.3f}" if fits else "",
                "predicted_step_seconds": f"{result['step_seconds']:.3f}" if fits else "",
                "predicted_exposed_communication_seconds":
                    f"{result['time']['exposed_communication_seconds']:.3f}" if fits else "",
                "peak_memory_gib": f"{result['peak_memory']['total_bytes'] / 2**30:.1f}",
                "fits": "yes" if fits else "no",
            })
            r = out_rows[-1]
            print(f"{r['where']:20} {r['model']:9} {r['plan']:14} {r['gpus']:>5} GPUs M {r['micro_batches']:>3} "
                  f"{r['overlap']:8}  TGS published {r['published_tgs']:>5}  predicted {r['predicted_tgs'] or 'OOM':>5}"
                  f"  ratio {r['ratio'] or '-'}", flush=True)
    write_comparison(HERE / "comparison.csv", out_rows)

    groups = [
        ("Table V, 64 GPUs, all overlaps, M = 8", lambda r: r["where"] == "Table V" and r["overlap"] == "all"
         and r["micro_batches"] == "8"),
        ("Table V, 64 GPUs, every level and M", lambda r: r["where"] == "Table V"),
        ("ZeRO-1, AMSP and MiCS, 8 GPUs", lambda r: r["gpus"] == "8" and r["plan"] != "zero3"),
        ("AMSP, 1024 GPUs", lambda r: r["gpus"] == "1024" and r["plan"].startswith("amsp")),
        ("ZeRO-1 and MiCS, 1024 GPUs", lambda r: r["gpus"] == "1024" and r["plan"].split("-")[0] in ("zero1", "mics")),
        ("ZeRO-3 and ZeRO++, 8 and 1024 GPUs", lambda r: r["plan"] in ("zero3", "zeropp-hpz8")),
    ]
    print_ratio_summary([(label, [float(r["ratio"]) for r in out_rows if wanted(r) and r["ratio"]])
                         for label, wanted in groups], width=44)

    # Table V's step time is a per-step part plus M micro-batches of compute:
    # a least-squares line through its four points separates the two.
    print(f"\nTable V as step = per-step + M x per-micro-batch (seconds), published / predicted")
    print(f"{'model':10} {'overlap':9} {'per micro-batch':>24} {'per step':>22}")
    for model in ("llama-7b", "llama-13b", "llama-30b"):
        for overlap in ("all", "ag-rs+ar", "ag-rs", "none"):
            rows = [r for r in out_rows if r["where"] == "Table V" and r["model"] == model and r["overlap"] == overlap]
            m = [int(r["micro_batches"]) for r in rows]
            published_line = line_through(m, [4096 * k / float(r["published_tgs"]) for k, r in zip(m, rows)])
            predicted_line = line_through(m, [float(r["predicted_step_seconds"]) for r in rows])
            print(f"{model:10} {overlap:9} {published_line[1]:7.3f} / {predicted_line[1]:5.3f} = "
                  f"{published_line[1] / predicted_line[1]:5.2f} {published_line[0]:9.3f} / {predicted_line[0]:6.3f}")


def line_through(x, y):
    """Least-squares intercept and slope."""
    n, sx, sy = len(x), sum(x), sum(y)
    sxx, sxy = sum(v * v for v in x), sum(a * b for a, b in zip(x, y))
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    return (sy - slope * sx) / n, slope


if __name__ == "__main__":
    main()
