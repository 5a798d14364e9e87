#!/usr/bin/env python3
"""Simulated Megatron-LM steps against Korthikanti et al. 2022.

Regenerate with:  python3 results/korthikanti_2022/compare.py [path/to/shardsim]

Reads published.csv: the end-to-end iteration times of "Reducing Activation
Recomputation in Large Transformer Models" (Korthikanti et al., MLSys 2023,
arXiv:2205.05198), Table 5: GPT models of 22 B, 175 B, 530 B and 1 T
parameters, each with full activation recomputation and with the paper's
sequence parallelism plus selective recomputation, on Selene's A100s. The
times and the setups (Table 3's heads, hidden size, layers, tensor and
pipeline sizes, GPUs and global batch; the micro-batch and chunks per stage)
are as Calculon's validation encodes them (calculon-ai/calculon,
calculon/megatron/validation.py and validation/<model>_<mode>.json), which
reproduces the paper's table. Every row runs `shardsim run --megatron` on
the Selene-like cluster of ../megatron_2021/selene.json with the datasheet
a100 profile.

What the setup fixes: fp16, sequence 2048, vocabulary 51,200, GPT layers
(learned positions, LayerNorm, GeLU, biases; the same model files as
../megatron_2021), no FlashAttention (2022), Megatron-LM's default dropout
of 0.1, no data parallelism (global batch = GPUs / (tensor x pipeline) x
micro-batches). Full recomputation checkpoints every layer
(--recompute-method uniform --recompute-num-layers 1) with plain tensor
parallelism; the paper's method is --sequence-parallel with
--recompute-granularity selective (the attention core rebuilt in the
backward). Megatron-LM of 2022 scatters each pipeline tensor over the
tensor-parallel ranks and gathers it on arrival (Narayanan et al. 2021,
section 4.1; its default until pipeline communication moved into
Megatron-Core), which matters for the full-recomputation rows only:
--scatter-gather-tensors-in-pipeline. What it assumes: gradient-accumulation
fusion on, Megatron-LM's default since the release that brought sequence
parallelism.
"""
import csv
import importlib.util
import json
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from comparison_report import print_ratio_summary, run_json, write_comparison  # noqa: E402
CLUSTER = HERE.parent / "megatron_2021" / "selene.json"
SEQUENCE = 2048
A100_DENSE_FP16_FLOPS = 312e12  # the peak MFU is counted against (record 1)


def model_flops(batch, layers, hidden, vocab=51200):
    """Model FLOPs per iteration, recomputation not counted (Korthikanti et al. 2022, section 6):
    72 B s l h^2 (1 + s / (6 h) + V / (12 l h))."""
    s, l, h = SEQUENCE, layers, hidden
    return 72 * batch * s * l * h * h * (1 + s / (6 * h) + vocab / (12 * l * h))


def megatron_2021():
    """The GPT model files of ../megatron_2021, shared rather than repeated."""
    spec = importlib.util.spec_from_file_location("megatron_2021", HERE.parent / "megatron_2021" / "compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def megatron_flags(row):
    layers, pipeline, chunks = int(row["layers"]), int(row["pipeline"]), int(row["chunks"])
    flags = [
        f"--num-layers {layers} --hidden-size {row['hidden']} --num-attention-heads {row['heads']}",
        f"--seq-length {SEQUENCE} --max-position-embeddings {SEQUENCE}",
        f"--micro-batch-size {row['micro_batch']} --global-batch-size {row['batch']} --fp16",
        "--attention-backend unfused --attention-dropout 0.1 --hidden-dropout 0.1",
        f"--tensor-model-parallel-size {row['tensor']} --pipeline-model-parallel-size {pipeline}",
        "--scatter-gather-tensors-in-pipeline",
    ]
    if row["recompute"] == "full":
        flags.append("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
    else:
        flags.append("--sequence-parallel --recompute-granularity selective")
    if chunks > 1:
        flags.append(f"--num-layers-per-virtual-pipeline-stage {layers // pipeline // chunks}")
    return "\n".join(flags) + "\n"


def simulate(shardsim, gpt, row, tmp):
    model = tmp / "model.json"
    model.write_text(json.dumps(gpt.model_json({"params_billion": row["model"].rstrip("B"), "hidden": row["hidden"],
                                                "heads": row["heads"], "layers": row["layers"]})))
    flags = tmp / "flags.txt"
    flags.write_text(megatron_flags(row))
    command = [shardsim, "run", "--cluster", str(CLUSTER), "--gpus", row["gpus"], "--model", str(model),
               "--megatron", str(flags), "--json"]
    return run_json(command)


def main():
    shardsim = sys.argv[1] if len(sys.argv) > 1 else str(HERE.parent.parent / "build" / "shardsim")
    gpt = megatron_2021()
    with (HERE / "published.csv").open() as f:
        published = list(csv.DictReader(f))
    out_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in published:
            result = simulate(shardsim, gpt, row, pathlib.Path(tmp))
            gpus = int(row["gpus"])
            measured = float(row["iteration_seconds"])
            step = result["step_seconds"]
            flops = model_flops(int(row["batch"]), int(row["layers"]), int(row["hidden"]))
            peak = gpus * A100_DENSE_FP16_FLOPS
            out_rows.append({
                "model": row["model"], "recompute": row["recompute"], "tensor": row["tensor"],
                "pipeline": row["pipeline"], "chunks": row["chunks"], "gpus": gpus, "batch": row["batch"],
                "micro_batch": row["micro_batch"], "published_seconds": row["iteration_seconds"],
                "predicted_seconds": f"{step:.3f}",
                "published_mfu": f"{flops / (peak * measured):.3f}",
                "predicted_mfu": f"{flops / (peak * step):.3f}",
                "throughput_ratio": f"{measured / step:.3f}",
                "peak_memory_gib": f"{result['peak_memory']['total_bytes'] / 2**30:.1f}",
                "fits": "yes" if result["fits"] else "no",
            })
            print(f"{row['model']:>5} {row['recompute']:13} {gpus:4} GPUs  published {measured:6.2f} s  "
                  f"predicted {step:6.2f} s  throughput ratio {measured / step:.3f}  "
                  f"{out_rows[-1]['peak_memory_gib']} GiB", flush=True)
    write_comparison(HERE / "comparison.csv", out_rows)
    print_ratio_summary([(label, [float(r["throughput_ratio"]) for r in out_rows if r["recompute"] == mode])
                         for label, mode in [("full recomputation", "full"),
                                             ("selective + sequence parallel", "selective+sp")]])
    print("\nfull / selective+sp iteration time (the paper's speedup):")
    by_model = {}
    for r in out_rows:
        by_model.setdefault(r["model"], {})[r["recompute"]] = r
    for model, modes in by_model.items():
        published_speedup = float(modes["full"]["published_seconds"]) / float(modes["selective+sp"]["published_seconds"])
        predicted_speedup = float(modes["full"]["predicted_seconds"]) / float(modes["selective+sp"]["predicted_seconds"])
        print(f"  {model:>5}  published {published_speedup:.3f}  predicted {predicted_speedup:.3f}")


if __name__ == "__main__":
    main()
