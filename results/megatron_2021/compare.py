#!/usr/bin/env python3
"""Simulated Megatron-LM and ZeRO-3 training against Narayanan et al. 2021.

Regenerate with:  python3 results/megatron_2021/compare.py [path/to/shardsim]

Reads published.csv: the end-to-end throughputs of "Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM" (Narayanan et al.,
SC 2021, arXiv:2104.04473), Table 1 (weak scaling of GPT models from 1.7 B
to 1 T parameters, tensor + pipeline + data parallelism) and Table 2 (GPT-3
175 B and the 530 B model under ZeRO-3 without model parallelism, and under
PTD parallelism, at a fixed global batch). Every row runs `shardsim run` on
the Selene-like cluster of selene.json with the setup section 5 gives, and
comparison.csv gets the predicted per-GPU throughput beside the published
one. Throughput is the paper's: equation (3)'s FLOPs per iteration, which
count the recomputed forward, over GPUs x step time.

What the paper fixes and shardsim follows: fp16 mixed precision, sequence
2048, vocabulary 51,200, GPT layers (learned positions, LayerNorm, GeLU,
biases, tied embeddings), full activation recomputation (equation (3)
assumes it), no FlashAttention (2021: the fused scale-mask-softmax kernel
between batched GEMMs), Megatron-LM's default dropout of 0.1 on attention
probabilities and hidden states, data-parallel gradients all-reduced once
after the backward (Megatron-LM's local DDP of 2021; no distributed
optimizer), its hook adding each micro-batch's gradients into the main
gradients (gradient-accumulation fusion came to Megatron-LM later), the
interleaved schedule for Table 1 (section 5.1).

What the paper leaves open, and what this script assumes (each a column of
comparison.csv): Table 1's micro-batch size (1, as in Table 2's PTD rows)
and its chunks per pipeline stage (the fewest above one that divide the
stage's layers: 2, or 3 for 60- and 105-layer models). Table 2's PTD rows are
run with the same schedule. Section 4.1's scatter/gather of pipeline
tensors, Megatron-LM's default then, is on (--scatter-gather-tensors-in-pipeline):
each tensor-parallel rank sends 1/t of the activation across the stage
boundary, and the receiving stage all-gathers it over NVLink.
"""
import csv
import json
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from comparison_report import print_ratio_summary, run_json, write_comparison  # noqa: E402
SEQUENCE = 2048
VOCAB = 51200


def equation_3_flops(batch, layers, hidden):
    """FLOPs per iteration, Narayanan et al. 2021 equation (3)."""
    s, l, h, v = SEQUENCE, layers, hidden, VOCAB
    return 96 * batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


def model_json(row):
    hidden, heads = int(row["hidden"]), int(row["heads"])
    return {
        "name": f"gpt-{row['params_billion']}b",
        "layers": int(row["layers"]), "hidden": hidden, "heads": heads, "kv_heads": heads,
        "head_dim": hidden // heads, "ffn_hidden": 4 * hidden, "vocab": VOCAB, "max_positions": SEQUENCE,
        "mlp": "gelu", "norm": "layernorm", "positions": "learned", "linear_biases": True,
        "tied_embeddings": True,
        "sources": ["Narayanan et al. 2021 (arXiv:2104.04473), Table 1/2: heads, hidden size and layers; "
                    "section 5.1: vocabulary 51,200 and sequence 2048; GPT-2 style layers"],
    }


def chunks_per_stage(layers, pipeline):
    if pipeline == 1:
        return 1
    per_stage = layers // pipeline
    return next(v for v in range(2, per_stage + 1) if per_stage % v == 0)


def megatron_flags(row, micro_batch, chunks):
    flags = [
        f"--num-layers {row['layers']} --hidden-size {row['hidden']} --num-attention-heads {row['heads']}",
        f"--seq-length {SEQUENCE} --max-position-embeddings {SEQUENCE}",
        f"--micro-batch-size {micro_batch} --global-batch-size {row['batch']} --fp16",
        "--attention-backend unfused --attention-dropout 0.1 --hidden-dropout 0.1",
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
        "--no-gradient-accumulation-fusion",
        f"--tensor-model-parallel-size {row['tensor']} --pipeline-model-parallel-size {row['pipeline']}",
        "--scatter-gather-tensors-in-pipeline",
    ]
    if chunks > 1:
        layers_per_chunk = int(row["layers"]) // int(row["pipeline"]) // chunks
        flags.append(f"--num-layers-per-virtual-pipeline-stage {layers_per_chunk}")
    return "\n".join(flags) + "\n"


def zero3_training(row, micro_batch):
    return {
        "sequence_length": SEQUENCE, "micro_batch_size": micro_batch,
        "global_batch": {"sequences": int(row["batch"])}, "precision": "fp16", "fp8_gemms": False,
        "recompute": "full", "flash_attention": False, "dropout": {"attention": 0.1, "hidden": 0.1},
    }


def simulate(shardsim, row, tmp):
    micro_batch = int(row["micro_batch"] or 1)
    chunks = chunks_per_stage(int(row["layers"]), int(row["pipeline"])) if row["system"] == "ptd" else 1
    model = tmp / "model.json"
    model.write_text(json.dumps(model_json(row)))
    command = [shardsim, "run", "--cluster", str(HERE / "selene.json"), "--gpus", row["gpus"], "--model", str(model),
               "--json"]
    if row["system"] == "ptd":
        flags = tmp / "flags.txt"
        flags.write_text(megatron_flags(row, micro_batch, chunks))
        command += ["--megatron", str(flags)]
    else:
        training = tmp / "training.json"
        training.write_text(json.dumps(zero3_training(row, micro_batch)))
        command += ["--plan", "zero3", "--training", str(training)]
    return run_json(command), micro_batch, chunks


def main():
    shardsim = sys.argv[1] if len(sys.argv) > 1 else str(HERE.parent.parent / "build" / "shardsim")
    with (HERE / "published.csv").open() as f:
        published = list(csv.DictReader(f))
    out_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in published:
            result, micro_batch, chunks = simulate(shardsim, row, pathlib.Path(tmp))
            gpus = int(row["gpus"])
            flops = equation_3_flops(int(row["batch"]), int(row["layers"]), int(row["hidden"]))
            measured = float(row["tflops_per_gpu"])
            fits = result["fits"]
            step = result["step_seconds"] if fits else None
            predicted = flops / (gpus * step) / 1e12 if fits else None
            out_rows.append({
                "table": row["table"], "system": row["system"], "params_billion": row["params_billion"],
                "tensor": row["tensor"], "pipeline": row["pipeline"], "chunks": chunks, "gpus": gpus,
                "batch": row["batch"], "micro_batch": micro_batch,
                "micro_batch_assumed": "yes" if not row["micro_batch"] else "no",
                "published_tflops_per_gpu": row["tflops_per_gpu"],
                "published_step_seconds": f"{flops / (gpus * measured * 1e12):.3f}",
                "predicted_step_seconds": f"{step:.3f}" if fits else "",
                "predicted_tflops_per_gpu": f"{predicted:.1f}" if fits else "",
                "ratio": f"{predicted / measured:.3f}" if fits else "",
                "peak_memory_gib": f"{result['peak_memory']['total_bytes'] / 2**30:.1f}",
                "fits": "yes" if fits else "no",
            })
            print(f"table {row['table']} {row['system']:5} {row['params_billion']:>7} B {gpus:5} GPUs  "
                  f"published {measured:5.0f}  predicted {out_rows[-1]['predicted_tflops_per_gpu'] or 'OOM':>6} "
                  f"TFLOP/s per GPU  ratio {out_rows[-1]['ratio'] or '-'}", flush=True)
    write_comparison(HERE / "comparison.csv", out_rows)
    print_ratio_summary([
        (label, [float(r["ratio"]) for r in out_rows if r["table"] == table and r["system"] == system and r["ratio"]])
        for label, table, system in [("Table 1, PTD", "1", "ptd"), ("Table 2, PTD", "2", "ptd"),
                                     ("Table 2, ZeRO-3", "2", "zero3")]])

if __name__ == "__main__":
    main()
