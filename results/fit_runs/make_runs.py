#!/usr/bin/env python3
"""Writes runs.json: the published end-to-end runs `shardsim calib fit-runs` fits to.

    python3 results/fit_runs/make_runs.py       # then, from the repository root:
    ./build/shardsim calib fit-runs results/fit_runs/runs.json --csv results/fit_runs/fit.csv \\
        -o results/fit_runs/profiles > results/fit_runs/fit.txt

Each run is a row of a comparison under results/ whose step shardsim can represent as the
paper ran it, with the same inputs the comparison's script gives `shardsim run` (its model,
Megatron-LM flags, training and plan files, written under inputs/ so the runs file can name
them). The measured step time is the paper's, as each comparison derives it.

The fit set, by family:
- megatron_2021: Narayanan et al. 2021, Tables 1 and 2, PTD (16 runs, A100, Megatron-LM, fp16).
- korthikanti_2022: Korthikanti et al. 2022, Table 5 (8 runs, A100, Megatron-LM, fp16).
- amsp_table_v: Chen et al. 2023 (AMSP), Table V, LLaMA-7B and 13B (32 runs, A800, AMSP's
  implementation, bf16): every overlap level and micro-batch count at 64 GPUs.
- llama3_405b: Llama 3, Table 4, rows 1 and 2 (H100, 8K sequences), attention at
  FlashAttention-2's efficiency, the kernel public when the model trained.
- torchtitan_fsdp2: torchtitan's published FSDP2 runs (docs/performance.md at 157a12c5; 8 runs,
  64 A100, PyTorch eager, bf16), every row.

Each family's runs are split into a fit half and a check half (by a hash of their names); the
fit sees only the fit half and reports, beside its in-sample and left-out errors, the check half's.

Left out, with the reason each comparison gives: Narayanan et al.'s ZeRO-3 rows and the AMSP
paper's DeepSpeed ZeRO-3/ZeRO++ rows (what held DeepSpeed's steps is not in the papers: 1.5-15x,
not a kernel effect), the AMSP end-to-end rows that give only an MFU (their FLOPs per token are
the paper's, not the model's), Table V's LLaMA-30B (the paper's FLOPs per token are 15 % below
the preset's: a smaller model than the one simulated), and Llama 3's row 3 (131K tokens with the paper's all-gather
context parallelism, which shardsim runs as ring attention).
"""
import csv
import hashlib
import importlib.util
import json
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE.parent
ROOT = RESULTS.parent
INPUTS = HERE / "inputs"


def module(name):
    spec = importlib.util.spec_from_file_location(name, RESULTS / name / "compare.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def relative(path):
    return str(path.relative_to(ROOT))


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return relative(path)


def megatron_2021_runs():
    m = module("megatron_2021")
    published = list(csv.DictReader(open(RESULTS / "megatron_2021" / "published.csv")))
    runs = []
    for row in published:
        if row["system"] != "ptd":
            continue
        micro_batch = int(row["micro_batch"] or 1)
        chunks = m.chunks_per_stage(int(row["layers"]), int(row["pipeline"]))
        name = f"megatron_2021/table{row['table']}-{row['params_billion']}b-{row['gpus']}gpu"
        model = write(INPUTS / f"{name}-model.json", json.dumps(m.model_json(row), indent=1) + "\n")
        flags = write(INPUTS / f"{name}-flags.txt", m.megatron_flags(row, micro_batch, chunks))
        flops = m.equation_3_flops(int(row["batch"]), int(row["layers"]), int(row["hidden"]))
        measured = flops / (int(row["gpus"]) * float(row["tflops_per_gpu"]) * 1e12)
        runs.append({"name": name, "family": "megatron_2021", "measured_step_seconds": measured,
                     "arguments": ["--cluster", relative(RESULTS / "megatron_2021" / "selene.json"),
                                   "--gpus", row["gpus"], "--model", model, "--megatron", flags]})
    return runs


def korthikanti_2022_runs():
    k = module("korthikanti_2022")
    gpt = module("megatron_2021")
    runs = []
    for row in csv.DictReader(open(RESULTS / "korthikanti_2022" / "published.csv")):
        name = f"korthikanti_2022/{row['model'].lower()}-{row['recompute']}"
        model = write(INPUTS / f"{name}-model.json", json.dumps(gpt.model_json(
            {"params_billion": row["model"].rstrip("B"), "hidden": row["hidden"], "heads": row["heads"],
             "layers": row["layers"]}), indent=1) + "\n")
        flags = write(INPUTS / f"{name}-flags.txt", k.megatron_flags(row))
        runs.append({"name": name, "family": "korthikanti_2022",
                     "measured_step_seconds": float(row["iteration_seconds"]),
                     "arguments": ["--cluster", relative(RESULTS / "megatron_2021" / "selene.json"),
                                   "--gpus", row["gpus"], "--model", model, "--megatron", flags]})
    return runs


def amsp_table_v_runs():
    a = module("amsp")
    runs = []
    for row in csv.DictReader(open(RESULTS / "amsp" / "published.csv")):
        # The paper's LLaMA-30B does 15 % fewer FLOPs per token than the preset's 32.5 B parameters
        # (results/README.md, AMSP section): a smaller model than the one simulated.
        if row["where"] != "Table V" or row["model"] == "llama-30b":
            continue
        micro_batches, gpus = int(row["micro_batches"]), int(row["gpus"])
        name = f"amsp_table_v/{row['model']}-m{micro_batches}-{row['overlap']}"
        training = write(INPUTS / f"amsp_table_v/{row['model']}-m{micro_batches}-training.json",
                         json.dumps(a.training(row["model"], micro_batches, gpus), indent=1) + "\n")
        tokens_per_gpu = a.SEQUENCE * micro_batches
        runs.append({"name": name, "family": "amsp_table_v",
                     "measured_step_seconds": tokens_per_gpu / float(row["published_tgs"]),
                     "arguments": ["--cluster", "a800-1024", "--gpus", row["gpus"], "--model", row["model"],
                                   "--plan", row["plan"], "--training", training, "--overlap", row["overlap"]]})
    return runs


def llama3_405b_runs():
    here = RESULTS / "llama3_405b"
    plan = relative(here / "plan.json")
    predicted = {r["row"]: r for r in csv.DictReader(open(here / "comparison.csv"))}
    runs = []
    for row in csv.DictReader(open(here / "published.csv")):
        if int(row["cp"]) > 1:
            continue
        gpus = int(row["gpus"])
        name = f"llama3_405b/row{row['row']}-{gpus}gpu"
        training = write(INPUTS / f"{name}-training.json", json.dumps({
            "sequence_length": int(row["sequence_length"]), "micro_batch_size": 1,
            "global_batch": {"sequences": int(row["dp"]) * int(row["sequences_per_dp"])},
            "precision": "bf16", "fp8_gemms": False, "recompute": "none", "flash_attention": True,
            "attention_kernel": "flash_attention_2"}, indent=1) + "\n")
        # The paper's stages fit 80 GiB by freeing tensors early, which shardsim does not model
        # (llama3_405b/compare.py): its time is taken on twice the memory, as there.
        cluster = json.loads((here / f"meta-roce-h100-{gpus // 1024}k.json").read_text())
        cluster["node"]["gpu_memory_bytes"] *= 2
        cluster_file = write(INPUTS / f"{name}-cluster.json", json.dumps(cluster, indent=1) + "\n")
        # MFU is the model's FLOPs over the step: the published step is the simulated one times
        # the simulated MFU over the published (comparison.csv, FlashAttention-3 column; the FLOPs
        # do not depend on the kernel).
        p = predicted[row["row"]]
        measured = float(p["predicted_step_seconds"]) * float(p["predicted_mfu"]) / (float(row["bf16_mfu_percent"]) / 100)
        runs.append({"name": name, "family": "llama3_405b", "measured_step_seconds": measured,
                     "arguments": ["--cluster", cluster_file, "--model", "llama3-405b", "--plan", plan,
                                   "--training", training]})
    return runs


def torchtitan_fsdp2_runs():
    t = module("torchtitan_fsdp2")
    runs = []
    for row in csv.DictReader(open(RESULTS / "torchtitan_fsdp2" / "published.csv")):
        name = f"torchtitan_fsdp2/row{row['row']}-{row['preset']}-b{row['local_batch']}-" + \
            row["activation_checkpointing"].replace(" ", "_")
        runs.append({"name": name, "family": "torchtitan_fsdp2",
                     "measured_step_seconds": t.published_step_seconds(row), "arguments": t.arguments(row)})
    return runs


def split_halves(runs):
    """Each family's runs in two halves, fit and check, by a hash of their names: the order
    of a paper's table (models, then settings) would put one setting in one half."""
    by_family = {}
    for run in runs:
        by_family.setdefault(run["family"], []).append(run)
    for members in by_family.values():
        ordered = sorted(members, key=lambda r: hashlib.sha1(r["name"].encode()).hexdigest())
        for k, run in enumerate(ordered):
            run["role"] = "fit" if k < (len(ordered) + 1) // 2 else "check"
    return runs


def main():
    runs = split_halves(megatron_2021_runs() + korthikanti_2022_runs() + amsp_table_v_runs() + llama3_405b_runs() +
                        torchtitan_fsdp2_runs())
    document = {"source": "results/fit_runs/make_runs.py: published end-to-end runs of results/megatron_2021, "
                          "korthikanti_2022, amsp (Table V), llama3_405b (rows 1-2) and torchtitan_fsdp2, as their "
                          "comparisons run them",
                "runs": runs}
    (HERE / "runs.json").write_text(json.dumps(document, indent=1) + "\n")
    print(f"{len(runs)} runs in {relative(HERE / 'runs.json')}")


if __name__ == "__main__":
    main()
