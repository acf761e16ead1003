#!/usr/bin/python3
"""GPT at scale: zero3, hybrid and ddp side by side, overlap read from traces, context length.

Every row is one `tessera train` (over shm processes for several ranks, `local` for one), the
`gpt` model on the `synthetic` data set's uniform random token windows, AdamW (lr 1e-4, weight
decay 0, no clipping), fp32, one thread a rank ([model.gpt] threads = 1), the OpenMP OpenBLAS
(LD_LIBRARY_PATH, as tools/bench/gpt_speed.py), ranks pinned to cores by `tessera train -n`'s
launcher (its default --bind-to auto). Each run records a trace (`--trace`, docs/tracing.md) of
its timed steps, which says where a step's time went: its layers' compute, the time the rank's
thread blocked waiting for each kind of collective (`wait all_gather` ...: the communication
the computation did not hide), the optimizer. Rounds run the rows in turn (A, B, C, A, B, C
...), the order reversed every other round; a row's round figure is the median over its timed
steps, the table the median over rounds, and each ratio the median of the per-round ratios
(rows of one round ran back to back, under the same load).

The machine may be shared (other users' builds): a run starts only once the other processes
take less than --quiet (10 %) of the CPUs over 3 s (waiting up to --quiet-wait seconds), and is
measured again (up to --retries times) when they took more during it: the share of every CPU
that was busy and not this script's or its children's (/proc/stat against getrusage), printed
for every run and stated with each table. Wall-clock figures of a run the neighbours shared mean
little; the gate keeps them out instead of averaging them in.

Parts (--parts, comma-separated):

  zero3    a 353 M-parameter GPT (GPT-2 medium's blocks, 28 of them, width 1024, 16 heads,
           byte vocabulary 256, its own head: tools/bench/memory_gpt.py's model), context 64,
           --zero3-batch sequences a step in all: ddp at 2 ranks against zero3 at 2 ranks with
           prefetch 1 (the default) and 0, and zero3 at 4 ranks (oversubscribed on a 2-core
           host: two runnable ranks a core). The gathers' hidden share is
           1 - wait(prefetch 1) / wait(prefetch 0): without prefetch each unit's all_gather is
           issued when it is needed and the thread waits for all of it, so that wait is the
           gathers' cost; with prefetch what is left of it is the part compute did not hide.
  hybrid   GPT-2 124M (12 layers, 12 heads, width 768, vocabulary 50,257, head tied), context
           64, --hybrid-batch sequences a step in all: ddp at 2 ranks, hybrid tp2 (dp 1) and
           pp2 with 1F1B over --micro-batches micro-batches (uniform and balanced partitions).
  overlap  ddp at 2 ranks on GPT-2 124M as in `hybrid`: the default buckets (first 1 MiB, then
           25 MiB) against one bucket for the whole model (first_bucket = bucket_cap = 1 GiB:
           its all-reduce can only start when backward has ended). Hidden share =
           1 - wait(buckets) / wait(one bucket), the same reading as zero3's.
  context  one process, one thread, batch 1, --context-model (124m or small) at context
           64, 128, 256, 512, 1024: tokens/s, the attention kernel's share of a step (the
           `attention forward`/`attention backward` spans of the gpt block), peak RSS and its
           growth per token between consecutive contexts (constant when memory is linear in T;
           the attention saves O(B H T) statistics, never the T x T scores, whose bytes are
           shown for comparison).

  tools/bench/gpt_scale.py --parts zero3 --rounds 3
  tools/bench/gpt_scale.py --parts hybrid,overlap,context --rounds 3
A zero3 round takes about 8 minutes on 2 cores and 12 GiB of RAM (ddp at 2 ranks holds
16 P = 5.3 GiB a rank); a hybrid/overlap round about 4, a context round about 5 (124m).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_speed import OPENMP_BLAS, blas_env, step_marks  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20

# name: (layers, heads, width, vocab, tie_embeddings)
MODELS = {
    "353m": (28, 16, 1024, 256, False),
    "124m": (12, 12, 768, 50257, True),
    "small": (4, 4, 128, 50257, True),
}


def machine_busy_seconds():
    """CPU-seconds every process on the machine has used since boot (and stolen by the
    hypervisor): /proc/stat's first line less its idle and iowait."""
    fields = [int(v) for v in open("/proc/stat").readline().split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds():
    """CPU-seconds of this script and of every descendant it has reaped (each launcher has
    reaped its workers): what the measured runs used."""
    import resource
    mine = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


class Neighbours:
    """What the rest of the machine (other users' builds, a hypervisor's steal) takes while a
    run measures: the share of every CPU that was busy and not ours. On a shared machine this,
    not the load average (a minute's moving average of runnable threads), says whether a run
    saw the machine it was meant to see."""

    def __init__(self):
        self.wall, self.busy, self.own = time.monotonic(), machine_busy_seconds(), own_cpu_seconds()

    def share(self):
        wall = time.monotonic() - self.wall
        others = (machine_busy_seconds() - self.busy) - (own_cpu_seconds() - self.own)
        return max(0.0, others) / (wall * os.cpu_count()) if wall > 0 else 0.0


def wait_for_quiet(threshold, longest):
    """Waits (up to `longest` seconds) until the others took less than `threshold` of the
    CPUs over 3 seconds; returns their share in the last window."""
    deadline = time.monotonic() + longest
    while True:
        window = Neighbours()
        time.sleep(3)
        share = window.share()
        if share < threshold or time.monotonic() >= deadline:
            return share


def parameter_count(model, context):
    layers, _, width, vocab, tied = MODELS[model]
    block = 12 * width * width + 13 * width
    return vocab * width + context * width + layers * block + 2 * width + (0 if tied else vocab * width)


# --- one run -----------------------------------------------------------------------------------

def run_tessera(args, model, context, ranks, batch, flags, scratch, label):
    """One `tessera train`: `batch` sequences a step in all, split over the data-parallel ranks
    the flags imply (batch_size is per replica: the caller passes it in `flags` when it is not
    batch / ranks). Returns {"steps": [(wall s, CPU s)], "ranks": summary ranks, "trace": files,
    "stderr": text}."""
    layers, heads, width, vocab, tied = MODELS[model]
    steps = args.warmup + args.steps
    metrics = scratch / f"{label}.metrics.jsonl"
    summary = scratch / f"{label}.summary.json"
    trace = scratch / f"{label}.trace.json"
    for stale in [metrics, summary] + list(scratch.glob(f"{label}.trace.rank*.json")):
        stale.unlink(missing_ok=True)
    command = [args.tessera, "train"] + (["-n", str(ranks)] if ranks > 1 else []) + [
        f"--runtime.transport={'shm' if ranks > 1 else 'local'}", "--runtime.timeout=900s",
        "--train.model=gpt", f"--model.gpt.layers={layers}", f"--model.gpt.heads={heads}",
        f"--model.gpt.width={width}", f"--model.gpt.context={context}",
        f"--model.gpt.vocab={vocab}", f"--model.gpt.tie_embeddings={'true' if tied else 'false'}",
        "--model.gpt.threads=1", "--train.dataset=synthetic",
        f"--dataset.synthetic.classes={vocab}", f"--dataset.synthetic.context={context}",
        f"--dataset.synthetic.samples={batch * (steps + 1)}", "--dataset.synthetic.test_samples=1",
        "--train.optimizer=adamw", "--optimizer.adamw.weight_decay=0", "--train.lr=0.0001",
        "--train.seed=1", "--train.epochs=1", f"--train.max_steps={steps}",
        "--train.eval_every=0", "--train.eval_batch_size=1", "--train.eval_samples=1",
        "--train.progress=off", f"--train.metrics_file={metrics}", "--summary", str(summary),
        "--trace", str(trace), f"--trace-steps", f"{args.warmup + 1}:{steps}"] + flags
    if not any(f.startswith("--train.batch_size=") for f in flags):
        command.append(f"--train.batch_size={batch // ranks}")
    env = blas_env(1, args.blas)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    marks = step_marks(proc, metrics)
    err = proc.stderr.read()
    if proc.returncode != 0:
        sys.exit(f"gpt_scale: {label} failed ({proc.returncode}):\n{' '.join(command)}\n{err[-3000:]}")
    per_step = [(math.nan, math.nan)]  # the first record's step has no predecessor
    for (t0, c0), (t1, c1) in zip(marks, marks[1:]):
        per_step.append((t1 - t0, math.nan if c0 is None or c1 is None else c1 - c0))
    files = sorted(scratch.glob(f"{label}.trace.rank*.json"))
    return {"steps": per_step, "ranks": json.loads(summary.read_text())["ranks"],
            "trace": files, "stderr": err}


# --- reading a trace ---------------------------------------------------------------------------

def trace_breakdown(files):
    """Per step, the mean over ranks of: the train_step span, its layers' compute (forward,
    backward and head spans less the waits inside them), the waits by operation, the optimizer
    steps, the attention spans (ms); the median over the recorded steps of each."""
    per_rank = []
    for path in files:
        events = json.loads(Path(path).read_text())["traceEvents"]
        steps = sorted((e for e in events if e.get("ph") == "X" and e["name"] == "train_step"),
                       key=lambda e: e["ts"])
        rows = []
        for s in steps:
            lo, hi = s["ts"], s["ts"] + s["dur"]
            inside = [e for e in events if e.get("ph") == "X" and e.get("tid") == s["tid"] and
                      lo <= e["ts"] <= hi and e is not s]
            row = {"step": s["dur"] / 1e3, "layers": 0.0, "optimizer": 0.0, "attention": 0.0,
                   "wait_in_layers": 0.0}
            layer_spans = [e for e in inside if e["name"] in ("forward", "backward", "head")]
            for e in inside:
                name = e["name"]
                if name.startswith("wait "):
                    key = name.replace(" ", "_")
                    row[key] = row.get(key, 0.0) + e["dur"] / 1e3
                    if any(l["ts"] <= e["ts"] <= l["ts"] + l["dur"] for l in layer_spans):
                        row["wait_in_layers"] += e["dur"] / 1e3
                elif name == "optimizer_step":
                    row["optimizer"] += e["dur"] / 1e3
                elif name.startswith("attention"):
                    row["attention"] += e["dur"] / 1e3
            # Layer spans nest (a pipeline's head holds no layer), so only outermost ones count.
            for e in layer_spans:
                if not any(o is not e and o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"]
                           for o in layer_spans):
                    row["layers"] += e["dur"] / 1e3
            row["compute"] = row["layers"] - row.pop("wait_in_layers")
            rows.append(row)
        keys = sorted({k for r in rows for k in r})
        per_rank.append({k: statistics.median(r.get(k, 0.0) for r in rows) for k in keys})
    keys = sorted({k for r in per_rank for k in r})
    return {k: statistics.mean(r.get(k, 0.0) for r in per_rank) for k in keys}


def median_figures(steps, warmup, tokens):
    kept = steps[warmup:]
    wall = [s[0] for s in kept if not math.isnan(s[0])]
    cpu = [s[1] for s in kept if not math.isnan(s[1])]
    return (tokens / statistics.median(wall) if wall else math.nan,
            tokens / statistics.median(cpu) if cpu else math.nan)


def bubble_of(stderr):
    """The hybrid plugin's last measured pipeline bubble (per cent), or None."""
    lines = [l for l in stderr.splitlines() if "pipeline bubble over" in l and "measured" in l]
    if not lines:
        return None
    return float(lines[-1].split("measured ")[1].split(" %")[0])


# --- rounds ------------------------------------------------------------------------------------

def measure(args, rows, scratch, part):
    """rows: [(key, model, context, ranks, batch, flags)]. Returns {key: [round results]}."""
    results = {key: [] for key, *_ in rows}
    for r in range(args.rounds):
        order = rows if r % 2 == 0 else rows[::-1]
        for key, model, context, ranks, batch, flags in order:
            for attempt in range(args.retries + 1):
                wait_for_quiet(args.quiet, args.quiet_wait)
                load = os.getloadavg()[0]
                neighbours = Neighbours()
                out = run_tessera(args, model, context, ranks, batch, flags, scratch,
                                  f"{part}-{key}-round{r + 1}")
                others = neighbours.share()
                if others < args.quiet:
                    break
                print(f"  {part} round {r + 1} {key}: others took {100 * others:.0f} % of the "
                      f"CPUs during the run" + (", measuring again" if attempt < args.retries else
                                                ", kept (no retries left)"),
                      file=sys.stderr, flush=True)
            wall, cpu = median_figures(out["steps"], args.warmup, batch * context)
            result = {"tokens_per_s": wall, "tokens_per_cpu_s": cpu, "load": load, "others": others,
                      "peak_rss_mib": max(x["peak_rss_bytes"] for x in out["ranks"]) / MIB,
                      "memory_report_mib": max(sum(x["memory_report"].values()) for x in out["ranks"]) / MIB,
                      "trace": trace_breakdown(out["trace"]), "bubble": bubble_of(out["stderr"])}
            results[key].append(result)
            print(f"  {part} round {r + 1} {key}: {wall:.1f} tokens/s, {cpu:.1f} tokens/CPU-s, "
                  f"peak RSS {result['peak_rss_mib']:.0f} MiB, others {100 * others:.0f} % of "
                  f"the CPUs, load {load:.1f}", file=sys.stderr,
                  flush=True)
    return results


def med(results, key, field):
    return statistics.median(r[field] for r in results[key])


def med_trace(results, key, field):
    return statistics.median(r["trace"].get(field, 0.0) for r in results[key])


def ratio(results, a, b, field="tokens_per_s"):
    return statistics.median(x[field] / y[field] for x, y in zip(results[a], results[b]))


def loads(results):
    values = [r["load"] for rs in results.values() for r in rs]
    others = [100 * r["others"] for rs in results.values() for r in rs]
    return (f"{min(values):.1f}-{max(values):.1f}, the others' share of the CPUs during the runs "
            f"{min(others):.0f}-{max(others):.0f} %")


def print_rows(title, results, labels, reference, comm_keys):
    print(f"\n{title}")
    head = ["row", "ranks", "tokens/s", "tokens/CPU-s", f"vs {reference}", "step ms", "compute ms",
            *[k.replace("wait_", "wait ") + " ms" for k in comm_keys], "optimizer ms",
            "peak RSS MiB"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for key, (label, ranks) in labels.items():
        cells = [label, str(ranks), f"{med(results, key, 'tokens_per_s'):.1f}",
                 f"{med(results, key, 'tokens_per_cpu_s'):.1f}",
                 f"{ratio(results, key, reference):.2f}x",
                 f"{med_trace(results, key, 'step'):.0f}", f"{med_trace(results, key, 'compute'):.0f}",
                 *[f"{med_trace(results, key, k):.0f}" for k in comm_keys],
                 f"{med_trace(results, key, 'optimizer'):.0f}",
                 f"{med(results, key, 'peak_rss_mib'):.0f}"]
        print("| " + " | ".join(cells) + " |")
    for key in labels:
        each = ", ".join(f"{r['tokens_per_s']:.1f}" for r in results[key])
        print(f"  {key} rounds (tokens/s): {each}")


def print_hidden(results, overlapped, exposed, wait, what):
    """The share of a collective's cost that compute hid: 1 - the wait left with overlap / the
    wait without it (which is the whole cost), by the medians over rounds and per round."""
    def share(a, b):
        return 1 - a / max(b, 1e-9)
    rounds = [share(x["trace"].get(wait, 0.0), y["trace"].get(wait, 0.0))
              for x, y in zip(results[overlapped], results[exposed])]
    print(f"{what} = {100 * share(med_trace(results, overlapped, wait), med_trace(results, exposed, wait)):.0f} % "
          f"(per round: {', '.join(f'{100 * r:.0f} %' for r in rounds)})")


# --- the parts ---------------------------------------------------------------------------------

def part_zero3(args, scratch):
    b, ctx = args.zero3_batch, 64
    rows = [("ddp2", "353m", ctx, 2, b, ["--train.strategy=ddp"]),
            ("zero3_2", "353m", ctx, 2, b, ["--train.strategy=zero3"]),
            ("zero3_2_p0", "353m", ctx, 2, b, ["--train.strategy=zero3",
                                                "--strategy.zero3.prefetch=0"]),
            ("zero3_4", "353m", ctx, 4, b, ["--train.strategy=zero3"])]
    if args.zero3_rows:
        rows = [r for r in rows if r[0] in args.zero3_rows.split(",")]
    results = measure(args, rows, scratch, "zero3")
    labels = {"ddp2": ("ddp", 2), "zero3_2": ("zero3, prefetch 1", 2),
              "zero3_2_p0": ("zero3, prefetch 0", 2), "zero3_4": ("zero3 (oversubscribed)", 4)}
    labels = {k: v for k, v in labels.items() if k in results}
    reference = "ddp2" if "ddp2" in results else next(iter(results))
    print_rows(f"zero3 against ddp: GPT of {parameter_count('353m', ctx) / 1e6:.1f} M parameters, "
               f"context {ctx}, {b} sequences a step in all, load {loads(results)}",
               results, labels, reference, ["wait_all_gather", "wait_reduce_scatter", "wait_all_reduce"])
    if "zero3_2" in results and "zero3_2_p0" in results:
        print_hidden(results, "zero3_2", "zero3_2_p0", "wait_all_gather",
                     "gathers hidden by prefetch: 1 - wait(prefetch 1) / wait(prefetch 0)")
    return results


def part_hybrid(args, scratch):
    b, ctx, m = args.hybrid_batch, 64, args.micro_batches
    pp = ["--train.strategy=hybrid", "--strategy.hybrid.pipeline_parallel=2",
          f"--strategy.hybrid.micro_batches={m}", "--strategy.hybrid.schedule=1f1b",
          f"--train.batch_size={b}"]
    rows = [("ddp2", "124m", ctx, 2, b, ["--train.strategy=ddp"]),
            ("tp2", "124m", ctx, 2, b, ["--train.strategy=hybrid",
                                         "--strategy.hybrid.tensor_parallel=2",
                                         f"--train.batch_size={b}"]),
            ("pp2", "124m", ctx, 2, b, pp + ["--strategy.hybrid.partition=uniform"]),
            ("pp2_balanced", "124m", ctx, 2, b, pp + ["--strategy.hybrid.partition=balanced"])]
    results = measure(args, rows, scratch, "hybrid")
    labels = {"ddp2": ("ddp", 2), "tp2": ("hybrid tp2", 2),
              "pp2": (f"hybrid pp2 1f1b m{m} uniform", 2),
              "pp2_balanced": (f"hybrid pp2 1f1b m{m} balanced", 2)}
    print_rows(f"hybrid against ddp: GPT-2 124M, context {ctx}, {b} sequences a step in all, "
               f"load {loads(results)}", results, labels, "ddp2",
               ["wait_all_reduce", "wait_recv", "wait_send"])
    for key in ("pp2", "pp2_balanced"):
        bubbles = [r["bubble"] for r in results[key] if r["bubble"] is not None]
        if bubbles:
            print(f"  {key}: pipeline bubble {statistics.median(bubbles):.1f} % (theory "
                  f"{100 / (m + 1):.1f} % for pp 2, m {m})")
    return results


def part_overlap(args, scratch):
    b, ctx = args.hybrid_batch, 64
    one = "--strategy.ddp.first_bucket=1073741824", "--strategy.ddp.bucket_cap=1073741824"
    rows = [("buckets", "124m", ctx, 2, b, ["--train.strategy=ddp"]),
            ("one_bucket", "124m", ctx, 2, b, ["--train.strategy=ddp", *one])]
    results = measure(args, rows, scratch, "overlap")
    labels = {"buckets": ("ddp, buckets 1 MiB then 25 MiB", 2),
              "one_bucket": ("ddp, one bucket (no overlap)", 2)}
    print_rows(f"ddp's gradient all-reduce against backward: GPT-2 124M, context {ctx}, {b} "
               f"sequences a step in all, load {loads(results)}", results, labels, "one_bucket",
               ["wait_all_reduce"])
    print_hidden(results, "buckets", "one_bucket", "wait_all_reduce",
                 "all-reduce hidden behind backward: 1 - wait(buckets) / wait(one bucket)")
    return results


def part_context(args, scratch):
    model = args.context_model
    layers, heads, width, vocab, _ = MODELS[model]
    contexts = [int(t) for t in args.contexts.split(",")]
    rows = [(f"T{t}", model, t, 1, 1, ["--train.strategy=ddp"]) for t in contexts]
    results = measure(args, rows, scratch, "context")
    print(f"\ntokens/s and memory against context: {model} ({layers} layers, width {width}, "
          f"{heads} heads, vocabulary {vocab}), batch 1, one process, one thread, "
          f"load {loads(results)}")
    head = ["T", "tokens/s", "tokens/CPU-s", "step ms", "attention ms", "attention share",
            "attention us/token", "peak RSS MiB", "RSS growth KiB/token", "T x T scores MiB"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    previous = None
    for t in contexts:
        key = f"T{t}"
        step = med_trace(results, key, "step")
        attention = med_trace(results, key, "attention")
        rss = med(results, key, "peak_rss_mib")
        growth = "" if previous is None else f"{(rss - previous[1]) * 1024 / (t - previous[0]):.0f}"
        scores = layers * heads * t * t * 4 / MIB  # had the forward saved its probabilities
        cells = [str(t), f"{med(results, key, 'tokens_per_s'):.1f}",
                 f"{med(results, key, 'tokens_per_cpu_s'):.1f}", f"{step:.0f}", f"{attention:.0f}",
                 f"{100 * attention / step:.1f} %", f"{1e3 * attention / t:.0f}", f"{rss:.0f}",
                 growth, f"{scores:.0f}"]
        print("| " + " | ".join(cells) + " |")
        previous = (t, rss)
    per_token = 4 * (layers * (16 * width + heads + 4) + width + 2 * vocab) / 1024
    print(f"  saved for backward by arithmetic: {per_token:.0f} KiB a token (every block's 16 C + "
          f"heads + 4 floats, the head's C, the logits and their gradient's 2 V)")
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default="zero3,hybrid,overlap,context")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=4, help="timed steps a run")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps at the start of a run")
    p.add_argument("--tessera", default=str(REPO / "build/ci/bin/tessera"))
    p.add_argument("--blas", default=OPENMP_BLAS)
    p.add_argument("--zero3-batch", type=int, default=8, help="sequences a step in all (zero3)")
    p.add_argument("--zero3-rows", help="a subset of ddp2,zero3_2,zero3_2_p0,zero3_4")
    p.add_argument("--hybrid-batch", type=int, default=4, help="sequences a step in all (hybrid, overlap)")
    p.add_argument("--micro-batches", type=int, default=4, help="pp2's micro-batches")
    p.add_argument("--context-model", default="124m", choices=["124m", "small"])
    p.add_argument("--contexts", default="64,128,256,512,1024")
    p.add_argument("--quiet", type=float, default=0.10,
                   help="start a run only when other processes take less than this share of the "
                        "CPUs, and measure it again when they took more during it (1: never wait)")
    p.add_argument("--quiet-wait", type=float, default=900, help="longest wait for quiet, seconds")
    p.add_argument("--retries", type=int, default=2, help="runs measured again when not quiet")
    p.add_argument("--json", help="also write every round's figures here")
    p.add_argument("--keep", help="keep the runs' traces and metrics in this folder")
    args = p.parse_args()
    if not Path(args.tessera).exists():
        sys.exit(f"gpt_scale: {args.tessera} does not exist; build it (cmake --build --preset ci) "
                 "or pass --tessera")
    scratch = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpt_scale."))
    scratch.mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} CPUs; {args.tessera}; {args.warmup} untimed + {args.steps} "
          f"timed steps a run, {args.rounds} rounds; load before {os.getloadavg()[0]:.1f}")
    parts = {"zero3": part_zero3, "hybrid": part_hybrid, "overlap": part_overlap,
             "context": part_context}
    everything = {}
    for name in args.parts.split(","):
        if name not in parts:
            sys.exit(f"gpt_scale: unknown part {name}; use {', '.join(parts)}")
        everything[name] = parts[name](args, scratch)
        sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
