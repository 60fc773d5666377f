#!/usr/bin/env python3
"""The Figures table of docs/figures.md, in Markdown, from the JSON lines of one
scripts/bench-all.sh run: its heading line and table, to paste over those in docs/figures.md.

    python3 scripts/bench-table.py OUT.jsonl

Each line of OUT.jsonl is a benchmark's JSON line with a "run" field added by bench-all.sh (the
command that printed it: "train_step", "pipeline", "dp_b128", ...). Figures are medians of the
timed repetitions with [min, max] after them; a row whose lines are missing (a benchmark failed,
was skipped, or torch is absent) says so instead of a figure. Exits 1 when OUT.jsonl has no
machine line (not a bench-all.sh file).
"""
import json
import sys


def load(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"bench-table: {path}:{n}: not JSON ({e})")
    return rows


class Missing(Exception):
    """A row's lines are not in the file."""


def pick(rows, run, bench, **match):
    """The first line of `run` with this "bench" and these fields."""
    for r in rows:
        if r.get("run") == run and r.get("bench") == bench and all(
            r.get(k) == v for k, v in match.items()
        ):
            return r
    where = ", ".join(f"{k}={v}" for k, v in match.items())
    raise Missing(f"no {bench} line in run {run}" + (f" ({where})" if where else ""))


def num(x, digits=3):
    """Thousands with separators (6,570), smaller figures to `digits` significant digits."""
    if x is None:
        return "null"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def spread(r, key, fn=num):
    """`key`'s median with [min, max] when the line has them and more than one repetition."""
    lo, hi = r.get(key + "_min"), r.get(key + "_max")
    if lo is None or hi is None or r.get("reps", 2) < 2:
        return fn(r[key])
    return f"{fn(r[key])} [{fn(lo)}, {fn(hi)}]"


def ratio(x):
    return f"{x:.2f}"


# ---- the rows: (what, function of the lines -> figure) ------------------------------------------


def sgemm(rows):
    one = pick(rows, "train_step", "sgemm", threads=1)
    two = pick(rows, "train_step", "sgemm", threads=2)
    return f"{spread(one, 'gflops')} GFLOP/s on 1 thread, {spread(two, 'gflops')} on 2"


def mlp_step(rows):
    parts = []
    for t in (1, 2):
        r = pick(rows, "train_step", "mlp_step", threads=t)
        unit = " samples/s" if t == 1 else ""
        # The ratio's spread is over its repetitions, each against its own sgemm (train_step.cpp).
        parts.append(
            f"{spread(r, 'samples_per_s')}{unit} on {t} thread{'s' if t > 1 else ''} "
            f"({ratio(r['ratio_to_sgemm'])} [{ratio(r['ratio_min'])}, {ratio(r['ratio_max'])}] "
            "of sgemm)"
        )
    return ", ".join(parts)


def torch(rows):
    parts = []
    version = None
    for t in (1, 2):
        tuned = pick(rows, "torch", "torch_mlp_step", threads=t, setting="tuned")
        shipped = pick(rows, "torch", "torch_mlp_step", threads=t, setting="shipped")
        cmp = pick(rows, "torch", "torch_compare", threads=t)
        version = tuned["torch_version"]
        parts.append(
            f"{t} thread{'s' if t > 1 else ''}: {spread(shipped, 'samples_per_s')} samples/s as "
            f"shipped, {spread(tuned, 'samples_per_s')} at its best setting; pipetrain "
            f"{ratio(cmp['ratio'])}× of it"
        )
    return f"PyTorch {version}: " + "; ".join(parts)


def fashion(rows):
    r = pick(rows, "fashion", "fashion_example")
    return (
        f"{100 * r['test_accuracy']:.1f}% test accuracy, {r['seconds']:.0f} s on "
        f"{r['threads']} threads"
    )


SCHEDULE_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "zb-h1": "ZB-H1"}


def pipelines_at(rows, M, run="pipeline"):
    lines = [
        r
        for r in rows
        if r.get("run") == run and r.get("bench") == "pipeline" and r.get("microbatches") == M
        and "speedup" in r
    ]
    if not lines:
        raise Missing(f"no {run} lines at M = {M}")
    parts = []
    for r in lines:
        name = SCHEDULE_NAMES.get(r["schedule"], r["schedule"])
        kind = "ideal" if r["ideal_kind"] == "analytic" else "simulated ideal"
        parts.append(
            f"{name} {spread(r, 'speedup', ratio)}× ({ratio(r['speedup_over_ideal'])} of {kind} "
            f"{ratio(r['ideal'])})"
        )
    return ", ".join(parts)


def balanced_pipeline(rows):
    """The same pipeline on a model whose two stages balance, with its simulator figures."""
    text = pipelines_at(rows, 8, "pipeline_deep")
    r = pick(rows, "pipeline_deep", "pipeline", microbatches=8)
    errors = [abs(v) for k, v in r.items() if k.startswith("bubble_err_vs_sim_pp_d") and v is not None]
    per_mb = [sum(float(x) for x in r[f"stage_fiw_ms_s{s}"].split("/")) for s in (0, 1)]
    return (
        f"{text}; stages of {per_mb[0]:.2f} and {per_mb[1]:.2f} ms per micro-batch (F + I + W); "
        f"simulated ÷ measured {ratio(r['predicted_over_measured'])}, bubble within "
        f"{max(errors):.1f} pp of the simulated one"
    )


def threads_at_8(rows):
    one = pick(rows, "pipeline", "baseline", threads=1, microbatches=8)
    two = pick(rows, "pipeline", "baseline", threads=2, microbatches=8)
    return f"{ratio(one['step_ms'] / two['step_ms'])}×"


def one_core_by_m(rows):
    lines = [
        r for r in rows if r.get("run") == "pipeline" and r.get("bench") == "baseline"
        and r.get("threads") == 1
    ]
    if not lines:
        raise Missing("no pipeline baseline lines")
    lines.sort(key=lambda r: r["microbatches"])
    return ", ".join(f"{num(r['samples_per_s'])} samples/s at M = {r['microbatches']}" for r in lines)


def memory_m8(rows):
    parts = []
    for s in ("gpipe", "1f1b", "zb-h1"):
        r = pick(rows, "pipeline", "pipeline_memory", schedule=s)
        parts.append(
            f"{SCHEDULE_NAMES[s]} {r['peak_mib_d0']:.1f} MiB ({r['inflight_s0']} in flight)"
        )
    return f"M = {r['microbatches']}: " + ", ".join(parts)


def pipeline_lines(rows):
    lines = [r for r in rows if r.get("run") == "pipeline" and r.get("bench") == "pipeline"
             and "speedup" in r]
    if not lines:
        raise Missing("no pipeline lines")
    return lines


def bubble_vs_sim(rows):
    def worst(pred):
        best = None
        for r in pipeline_lines(rows):
            if not pred(r["microbatches"]):
                continue
            for k, v in r.items():
                if k.startswith("bubble_err_vs_sim_pp_d") and v is not None:
                    if best is None or abs(v) > abs(best[0]):
                        best = (v, r["schedule"], r["microbatches"], k[len("bubble_err_vs_sim_pp_d"):])
        return best

    small, large = worst(lambda m: m <= 4), worst(lambda m: m >= 8)
    parts = []
    if small:
        parts.append(f"within {abs(small[0]):.1f} pp for M ≤ 4")
    if large:
        parts.append(
            f"up to {abs(large[0]):.1f} pp at M ≥ 8 ({large[1]}, M = {large[2]}, device {large[3]})"
        )
    return ", ".join(parts)


def predicted(rows):
    values = [
        r["predicted_over_measured"] for r in pipeline_lines(rows)
        if r["microbatches"] >= 2 and r.get("predicted_over_measured") is not None
    ]
    if not values:
        raise Missing("no predicted_over_measured at M >= 2")
    return f"{ratio(min(values))}–{ratio(max(values))} (every schedule, M ≥ 2; target 0.9–1.1)"


def zb_vs_1f1b(rows):
    lines = sorted(
        (r for r in rows if r.get("run") == "pipeline" and r.get("bench") == "zb_vs_1f1b"),
        key=lambda r: r["microbatches"],
    )
    if not lines:
        raise Missing("no zb_vs_1f1b lines")
    sim = ", ".join(f"{ratio(r['sim_equal_ratio'])} (M = {r['microbatches']})" for r in lines)
    measured = ", ".join(f"{ratio(r['measured_ratio'])} (M = {r['microbatches']})" for r in lines)
    return f"simulated with F = I = W: {sim}; measured {measured}"


def allreduce(rows):
    def bus(impl, mib):
        r = pick(rows, "allreduce", "allreduce", impl=impl, bytes=mib << 20)
        lo, hi = r["busbw_min_gbps"], r["busbw_gbps"]
        return f"{r['busbw_median_gbps']:.1f} [{lo:.1f}, {hi:.1f}] GB/s"

    copy = pick(rows, "allreduce", "memcpy")
    return (
        f"busbw {bus('mpi', 4)} at 4 MiB, {bus('mpi', 64)} at 64 MiB (memcpy "
        f"{spread(copy, 'gbps', lambda x: f'{x:.1f}')} GB/s in the same run); in-process "
        f"{bus('in_process', 4)} at 4 MiB"
    )


DP_BATCHES = (128, 256, 512)


def data_parallel(rows):
    def at(bucket):
        parts = []
        for b in DP_BATCHES:
            r = pick(rows, f"dp_b{b}", "dp", bucket_mb=bucket)
            parts.append(f"{spread(r, 'speedup', ratio)}× (batch {b})")
        return ", ".join(parts)

    return (
        f"one 25 MiB bucket: {at(25)}; 4 MiB buckets overlapped with backward: {at(4)} "
        "(target 1.85×)"
    )


def gpt(rows):
    parts = []
    for setup in ("1 device x 1 thread", "1 device x 2 threads", "2 stages x 1 thread (1f1b, M=4)"):
        r = pick(rows, "gpt", "gpt_step", setup=setup)
        parts.append(
            f"{spread(r, 'tokens_per_s')} tokens/s on {setup.replace(' x ', ' × ')} "
            f"({ratio(r['ratio_to_sgemm'])} of sgemm)"
        )
    return ", ".join(parts)


def tensor_parallel(rows):
    def speedup(setup, baseline):
        r = pick(rows, "tensor_parallel", "tensor_parallel_ratio", setup=setup, baseline=baseline)
        return f"{num(r['speedup'])} [{num(r['speedup_min'])}, {num(r['speedup_max'])}]×"

    counted = pick(rows, "tensor_parallel", "tensor_parallel_bytes_total", sequence_parallel=0)
    tp2 = "TP=2, 2 devices x 1 thread"
    return (
        f"{speedup(tp2, 'TP=1, 1 device x 1 thread')} on 2 devices × 1 thread against 1 × 1; "
        f"{speedup(tp2, 'TP=1, 1 device x 2 threads')} against 1 device × 2 threads; tensor-"
        f"parallel bytes per step {'equal to' if counted['exact'] else 'NOT equal to'} the formula"
    )


def full_shard(rows):
    """Each setup against DP R=2 in the same run: speed (each round's step-time ratio) and the
    peak bytes of one device in a step; and the run's own checks."""
    run, dp_name = "full_shard", "DP R=2"
    cfg = pick(rows, run, "full_shard_config")
    dp = pick(rows, run, "full_shard_step", setup=dp_name)

    def mib(r):
        return f"{r['peak_bytes_per_device'] / 2**20:.1f} MiB"

    def against_dp(setup, label):
        r = pick(rows, run, "full_shard_ratio", setup=setup, baseline=dp_name)
        step = pick(rows, run, "full_shard_step", setup=setup)
        over = ""
        if step["oversubscribed"]:
            over = f"; {step['devices']} devices on {step['cores']} cores: oversubscribed"
        return (
            f"{label} {spread(r, 'speedup', ratio)}×, {mib(step)} ({ratio(r['peak_ratio'])}"
            f"{over})"
        )

    checks = [r for r in rows if r.get("run") == run and r.get("bench") == "full_shard_check"]
    if not checks:
        raise Missing(f"no full_shard_check lines in run {run}")
    same = all(r.get("same_first_loss", 1) == 1 for r in checks)
    bounded = all(r.get("held_within_bound", 1) == 1 for r in checks)
    full = pick(rows, run, "full_shard_ratio", setup="full shard R=2", baseline=dp_name)
    return (
        f"{cfg['model']}, AdamW, batch {cfg['batch']}, M = {cfg['microbatches']}: DP "
        f"{spread(dp, 'step_ms')} ms, peak {mib(dp)} per device; against it (samples/s ratio, "
        f"peak per device and its ratio): "
        + "; ".join(
            against_dp(setup, label)
            for setup, label in (
                ("single device", "1 device"),
                ("ZeRO-1 R=2", "ZeRO-1"),
                ("full shard R=2", "full"),
                ("full shard R=2, kept after forward", "full, kept after forward"),
                ("full shard R=2, reduce every micro-batch", "full, reduce every micro-batch"),
                ("pipeline S=2", "pipeline S = 2"),
                ("pipeline S=2 x full shard R=2", "S = 2 × full R = 2"),
            )
        )
        + f"; full sharding holds {ratio(full['held_ratio'])} of DP's between steps "
        f"({'within' if bounded else 'NOT within'} 1/2 + padding); first losses "
        f"{'equal' if same else 'NOT equal'} bit for bit (R = 2: DP's, R = 1: 1 device's)"
    )


def gpt_cpu(rows):
    r = pick(rows, "gpt", "gpt_step_cpu")
    return (
        f"{ratio(r['ratio_to_sgemm_cpu'])} of sgemm; step "
        f"{num(r['step_cpu_ms_median'])} [{num(r['step_cpu_ms_min'])}, "
        f"{num(r['step_cpu_ms_max'])}] ms of CPU"
    )


def attention(rows):
    parts = []
    for run in ("attention", "attention_t512"):
        r = pick(rows, run, "attention")
        parts.append(
            f"T {r['T']}: {num(r['gflops_median'])} [{num(r['gflops_min'])}, "
            f"{num(r['gflops_max'])}] GFLOP/s ({num(r['gflops_cpu_median'])} per CPU second)"
        )
    return "; ".join(parts)


CHECKPOINT_RUNS = (
    ("ckpt_p1_s1", "1 process, 1 stage"),
    ("ckpt_p1_s2", "1 process, 2 stages"),
    ("ckpt_p2_s2", "`mpirun -np 2 --stages 2`"),
    ("ckpt_p4_s2_dp2", "`-np 4 --stages 2 --dp 2`"),
)


def checkpoint(rows, bench, who):
    parts = []
    for run, label in CHECKPOINT_RUNS:
        r = pick(rows, run, bench)
        parts.append(
            f"{label}: {r['median_s']:.2f} s [{r['min_s']:.2f}, {r['max_s']:.2f}] "
            f"({r[who]} {who[:-1]}{'s' if r[who] > 1 else ''}, "
            f"{r['ms_per_mib_per_' + who[:-1]]:.2f} ms/MiB each)"
        )
    size = pick(rows, CHECKPOINT_RUNS[0][0], bench)["total_mib"]
    return f"{size:.0f} MiB; " + "; ".join(parts)


def memory(rows):
    one = pick(rows, "memory", "memory", config="1 device")
    two = pick(rows, "memory", "memory", config="2 stages")
    return (
        f"batch {one['batch']}, {num(one['steps'])} steps: peak {one['peak_rss_mib']:.1f} MiB on 1 "
        f"device, {two['peak_rss_mib']:.1f} MiB as 2 stages (1F1B, M = {two['microbatches']}); "
        f"after warm-up {one['growth_mib']:+.2f} MiB on 1 device "
        f"({one['growth_second_half_mib']:+.2f} over the second half), "
        f"{two['growth_mib']:+.2f} as 2 stages; live device bytes "
        f"{one['device_live_growth_bytes']:+d} / {two['device_live_growth_bytes']:+d}"
    )


def step_trace(rows):
    r = pick(rows, "flight_recorder", "step_trace_train")
    return (
        f"{r['trace_ns_per_action']:.0f} ns per action: {r['actions_per_step']} actions of a "
        f"2-stage MLP step (M = {r['microbatches']}, batch {r['batch']}) cost at most "
        f"{r['bound_pct']:.3f}% of it; steps traced vs not, median of {r['reps']}: "
        f"{r['overhead_pct']:+.2f}% (traced {r['step_ms_traced_min']:.0f}–"
        f"{r['step_ms_traced_max']:.0f} ms, untraced {r['step_ms_untraced_min']:.0f}–"
        f"{r['step_ms_untraced_max']:.0f})"
    )


def gpt_example(rows):
    tied = pick(rows, "gpt_example", "gpt_example")
    text = (
        f"validation loss {tied['val_loss']:.2f} nats/byte in {tied['seconds']:.0f} s on "
        f"{tied['threads']} threads ({num(tied['tokens_per_s'])} tokens/s)"
    )
    try:
        untied = pick(rows, "gpt_example_untied", "gpt_example")
        text += f"; untied {untied['val_loss']:.2f}"
    except Missing:
        pass
    return text + " (target 2.4)"


ROWS = [
    ("sgemm 2048³ (the limit)", sgemm),
    ("MLP 784-1024×4-10 training step, batch 256", mlp_step),
    ("PyTorch on the same machine, same MLP step (`scripts/torch-compare.sh`)", torch),
    ("Fashion-MNIST MLP, 3 epochs", fashion),
    ("2 stages on 2 cores vs 1 device on 1 core, MLP, M = 8", lambda r: pipelines_at(r, 8)),
    ("same at M = 2", lambda r: pipelines_at(r, 2)),
    ("same, M = 8, a model whose two stages balance (`--model deep`: 784-512×8-10)",
     balanced_pipeline),
    ("1 device on 2 threads, same M = 8, for comparison", threads_at_8),
    ("1 device on 1 core by micro-batch count (the pipelines' baseline)", one_core_by_m),
    ("peak memory of stage 0", memory_m8),
    ("measured bubble − simulated bubble (profiled stage costs), MLP", bubble_vs_sim),
    ("simulated step time ÷ measured", predicted),
    ("ZB-H1 ÷ 1F1B step time", zb_vs_1f1b),
    ("all-reduce, 2 MPI processes (`pipetrain-bench-allreduce`)", allreduce),
    (
        "data parallel, 2 processes × 1 core vs 1 process × 1 core "
        "(`mpirun -np 2 pipetrain-bench-data-parallel`), MLP, same batch per replica",
        data_parallel,
    ),
    ("GPT (context 128, d 256, 4 layers, batch 16, `pipetrain-bench-gpt`)", gpt),
    (
        "same, 1 thread, in CPU seconds (`gpt_step_cpu` line: sgemm and steps alternated)",
        gpt_cpu,
    ),
    (
        "causal attention alone, forward + backward (batch 16, 4 heads of 64, 1 thread; "
        "`pipetrain-bench-attention`)",
        attention,
    ),
    (
        "checkpoint save (MLP 4 × 2560 + SGD momentum; `pipetrain-bench-checkpoint`, fsync "
        "included, warm page cache)",
        lambda r: checkpoint(r, "checkpoint_save", "writers"),
    ),
    ("checkpoint load, same", lambda r: checkpoint(r, "checkpoint_load", "readers")),
    ("resident memory, MLP training (`pipetrain-bench-memory`)", memory),
    (
        "per-action trace (the measured bubble, `--trace`, `--timeline`; "
        "`pipetrain-bench-flight-recorder`)",
        step_trace,
    ),
    ("`--tp 2` vs `--tp 1`, the GPT above, one process (`pipetrain-bench-tensor-parallel`)",
     tensor_parallel),
    (
        "`--shard full` (ZeRO-3) vs `--dp 2`, ZeRO-1 and pipelines, one process, 1 thread per "
        "device (`pipetrain-bench-full-shard`)",
        full_shard,
    ),
    ("GPT example, 200 steps, defaults (tied embeddings)", gpt_example),
]


def header(rows):
    machine = [r for r in rows if r.get("bench") == "machine"]
    if not machine:
        sys.exit("bench-table: no machine line: not the output of scripts/bench-all.sh")
    m = machine[0]
    end = next((r for r in rows if r.get("bench") == "machine_end"), {})
    onednn = next((r.get("onednn") for r in rows if r.get("onednn")), None)
    load = f"load average {m['load_start']} at the start"
    if end:
        load += f", {end['load_end']} at the end; {end['seconds'] / 60:.0f} min"
    return (
        f"## Figures (this machine: {m['cores']} cores, {m['cpu']}"
        + (f", oneDNN {onednn}" if onednn else "")
        + f"; {m['date']}, commit {m['commit']}; {load}; median [min, max] of the timed "
        "repetitions)"
    )


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench-table.py OUT.jsonl (the output of scripts/bench-all.sh)")
    rows = load(sys.argv[1])
    print(header(rows))
    print()
    print("| what | figure |")
    print("|---|---|")
    for what, figure in ROWS:
        try:
            text = figure(rows)
        except Missing as e:
            text = f"not measured ({e})"
        except KeyError as e:  # a benchmark renamed a field: say which, keep the other rows
            text = f"not measured (no field {e} in its line)"
        print(f"| {what} | {text} |")
    failed = [r for r in rows if r.get("bench") == "failed"]
    if failed:
        print()
        for r in failed:
            print(f"Failed in this run: `{r['run']}` (exit {r['rc']}).")


if __name__ == "__main__":
    main()
