#!/usr/bin/python3
"""GPT training speed: tessera against PyTorch and llm.c on the same model, batch and CPU.

Each contender trains GPT-2's architecture (learned positions, pre-norm blocks, causal attention,
GELU-tanh MLP of 4x width, final layer norm, a bias-free vocabulary head; fp32) with AdamW
(lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay 0, no clipping) on uniform random token ids,
forward + backward + update per step, at the same thread count and on the same OpenBLAS (the
OpenMP build, through LD_LIBRARY_PATH; Debian's torch otherwise uses the reference BLAS):

  tessera  `tessera train` (ddp, one rank, `local` transport, the `synthetic` data set's token
           windows); a step's time is the difference of consecutive `time_s` in its metrics file,
           its CPU time the process's, read from /proc as each step's record appears.
  PyTorch  the nanoGPT-style model below (written for this script), torch.optim.AdamW.
  llm.c    train_gpt2.c from an llm.c snapshot (--llmc DIR), built -Ofast -march=native -fopenmp
           with tools/bench/llmc_steps.c as its driver; its checkpoint is written here (random
           weights in llm.c's layout), unpadded vocabulary so that it does the same work. llm.c
           always ties the head to the token embedding and uses its own GEMM loops, not BLAS.

With --ranks R (R > 1) the comparison is data-parallel, R processes of --threads threads each and
the shape's batch split over them: tessera `tessera train -n R` (ddp over `shm`) against PyTorch
DistributedDataParallel over gloo (R worker processes, default 25 MiB buckets); wall clock is
rank 0's step time, CPU time every rank's (tessera: the launcher's process tree).
--baseline PATH adds another tessera build (a copy of build/ci/bin and build/ci/lib) to the same
rounds, for before/after figures of a change.

Rounds alternate the contenders' order; each contender's first --warmup steps are dropped, its
round figure is the median of the rest, and the table shows the median over rounds of tokens per
second (wall clock) and of tokens per CPU-second (the process's CPU time: steadier on a loaded
machine). MFU: (6 N + 12 L C T) FLOPs per token, N = 12 L C^2 + V C (the matrices of blocks and
head), over the OpenBLAS sgemm peak measured here on the model's own GEMM shapes.

  tools/bench/install-bench-deps.sh          # once: python3-torch, OpenBLAS (OpenMP), a C compiler
  tools/bench/gpt_speed.py --llmc /tmp/llm.c --shapes small,124m --threads 1 --rounds 3
  tools/bench/gpt_speed.py --shapes small --ranks 2 --threads 1 --rounds 3   # ddp against DDP
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

REPO = Path(__file__).resolve().parents[2]
OPENMP_BLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"

# name: (layers, heads, width, vocab, batch, time)
SHAPES = {
    "small": (4, 4, 128, 50257, 8, 64),
    "124m": (12, 12, 768, 50257, 4, 64),
    # GPT-2 124M at context 256: one sequence a step keeps llm.c's round near a minute here.
    "124m-256": (12, 12, 768, 50257, 1, 256),
}


def blas_env(threads, blas_dir):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = blas_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["OMP_NUM_THREADS"] = str(threads)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    return env


# --- PyTorch (run in a child process: --worker torch) ----------------------------------------

def torch_worker(shape, threads, steps, tied, rank=0, world=1, port=0):
    """One process of the PyTorch side; with world > 1 one rank of DistributedDataParallel over
    gloo (127.0.0.1:port), each rank training shape's batch / world sequences of its own."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    layers, heads, width, vocab, batch, seq = shape
    batch //= world

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(width, 3 * width)
            self.c_proj = nn.Linear(width, width)
            # A plain attribute, not a buffer: DDP broadcasts buffers, and gloo has no bool.
            self.causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool))

        def forward(self, x):
            n, t, c = x.shape
            q, k, v = self.c_attn(x).split(width, dim=2)
            # [n, heads, t, head size]
            q, k, v = (z.view(n, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // heads)
            scores = scores.masked_fill(~self.causal[:t, :t], float("-inf"))
            y = F.softmax(scores, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).contiguous().view(n, t, c))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(width)
            self.attn = SelfAttention()
            self.ln_2 = nn.LayerNorm(width)
            self.c_fc = nn.Linear(width, 4 * width)
            self.gelu = nn.GELU(approximate="tanh")
            self.mlp_proj = nn.Linear(4 * width, width)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, width)
            self.wpe = nn.Embedding(seq, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)
            self.lm_head = nn.Linear(width, vocab, bias=False)
            if tied:
                self.lm_head.weight = self.wte.weight
            for name, p in self.named_parameters():
                if p.dim() == 2:  # GPT-2's init; residual projections scaled by 1/sqrt(2 layers)
                    std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, ids, targets):
            positions = torch.arange(ids.shape[1])
            x = self.wte(ids) + self.wpe(positions)
            for block in self.blocks:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, vocab), targets.view(-1))

    model = Gpt()
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
        model = nn.parallel.DistributedDataParallel(model)  # default 25 MiB buckets
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.0)
    generator = torch.Generator().manual_seed(1 + rank)
    stream = torch.randint(0, vocab, (batch, seq + 1), generator=generator)
    ids, targets = stream[:, :-1].contiguous(), stream[:, 1:].contiguous()
    for step in range(1, steps + 1):
        wall, cpu = time.perf_counter(), time.process_time()
        optimizer.zero_grad(set_to_none=True)
        loss = model(ids, targets)
        loss.backward()
        optimizer.step()
        print(json.dumps({"rank": rank, "step": step, "wall_s": time.perf_counter() - wall,
                          "cpu_s": time.process_time() - cpu, "loss": loss.item()}), flush=True)


def gemm_worker(shape, threads, repeats):
    """sgemm rates (through torch.matmul, so the same OpenBLAS) on the model's own shapes, by wall
    clock and by process CPU time (the best of `repeats` each: the machine's peak, not its load)."""
    import torch

    torch.set_num_threads(threads)
    _, _, width, vocab, batch, seq = shape
    rows = batch * seq
    rates = {"wall": {}, "cpu": {}}
    for k, n in ((width, 3 * width), (width, 4 * width), (4 * width, width), (width, vocab)):
        a, b = torch.randn(rows, k), torch.randn(k, n)
        torch.matmul(a, b)
        best_wall = best_cpu = math.inf
        for _ in range(repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            torch.matmul(a, b)
            best_wall = min(best_wall, time.perf_counter() - wall)
            best_cpu = min(best_cpu, time.process_time() - cpu)
        flops = 2.0 * rows * k * n
        rates["wall"][f"{rows}x{k}x{n}"] = flops / best_wall
        # CPU time adds every thread's: per thread-second, times the threads, is the peak rate.
        rates["cpu"][f"{rows}x{k}x{n}"] = flops / best_cpu * threads
    print(json.dumps(rates), flush=True)


# --- the contenders as processes -------------------------------------------------------------

def run_torch(shape, threads, steps, tied, blas_dir, ranks=1):
    """(wall, CPU) seconds per step: rank 0's wall clock, every rank's CPU time added."""
    command = [sys.executable, __file__, "--worker", "torch", "--worker-shape", json.dumps(shape),
               "--threads", str(threads), "--steps", str(steps)] + (["--head", "tied"] if tied else [])
    port = 29600 + os.getpid() % 1000
    procs = [subprocess.Popen(command + ["--worker-rank", f"{r},{ranks},{port}"], text=True,
                              env=blas_env(threads, blas_dir), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for r in range(ranks)]
    outputs = [p.communicate() for p in procs]
    for p, (_, err) in zip(procs, outputs):
        if p.returncode != 0:
            sys.exit(f"gpt_speed: the PyTorch worker failed ({p.returncode}): {err[-2000:]}")
    per_rank = [[json.loads(line) for line in out.splitlines() if line.startswith("{")]
                for out, _ in outputs]
    return [(rows[0]["wall_s"], sum(r["cpu_s"] for r in rows)) for rows in zip(*per_rank)]


def process_cpu_seconds(pid):
    """Run time of every thread of `pid` and of its child processes, recursively, so far (ns
    precision from schedstat): `tessera train -n 2` is a launcher and its two ranks."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    children = []
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[0])
            children += (task / "children").read_text().split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass  # a thread that ended between listing and reading
    return total * 1e-9 + sum(process_cpu_seconds(int(c)) for c in children)


def step_marks(proc, metrics):
    """Follows the metrics file `metrics` of the running `tessera train` `proc` to its end:
    [(time_s of each step record, CPU seconds of proc's process tree when the record appeared,
    None for records seen only after proc ended)]."""
    marks = []
    seen = 0
    while True:
        done = proc.poll() is not None
        if metrics.exists():
            text = metrics.read_text()
            lines = text.splitlines()
            complete = lines if text.endswith("\n") else lines[:-1]
            for line in complete[seen:]:
                record = json.loads(line)
                if "time_s" in record:
                    marks.append((record["time_s"], None if done else process_cpu_seconds(proc.pid)))
            seen = len(complete)
        if done:
            return marks
        time.sleep(0.002)


TESSERA_INI = """[runtime]
transport = {transport}
world_size = {ranks}
[train]
strategy = ddp
model = gpt
optimizer = adamw
dataset = synthetic
epochs = 1
max_steps = {steps}
batch_size = {batch}
lr = 0.0001
seed = 1
eval_every = 0
progress = off
[model.gpt]
layers = {layers}
heads = {heads}
width = {width}
context = {seq}
vocab = {vocab}
threads = {threads}
{head_option}
[dataset.synthetic]
samples = {samples}
test_samples = {batch}
classes = {vocab}
context = {seq}
[optimizer.adamw]
weight_decay = 0
"""


def run_tessera(tessera, shape, threads, steps, tied, blas_dir, scratch, ranks=1):
    """`tessera` is a build's bin/tessera; its own lib/ goes first on the library path, so that a
    copy of an older build (--baseline) loads its own libtessera rather than the RUNPATH's. With
    ranks > 1: ddp over shm, shape's batch split over the ranks (batch_size is per rank)."""
    layers, heads, width, vocab, batch, seq = shape
    ini = scratch / "tessera_gpt.ini"
    metrics = scratch / "tessera_metrics.jsonl"
    metrics.unlink(missing_ok=True)
    head_option = f"tie_embeddings = {'true' if tied else 'false'}" if tessera_ties(tessera) else ""
    if tied and not head_option:
        sys.exit("gpt_speed: --head tied, but this tessera's gpt model has no tie_embeddings option")
    ini.write_text(TESSERA_INI.format(steps=steps, batch=batch // ranks, layers=layers, heads=heads,
                                      width=width, seq=seq, vocab=vocab, threads=threads,
                                      head_option=head_option, samples=batch * (steps + 1),
                                      transport="shm" if ranks > 1 else "local", ranks=ranks))
    env = blas_env(threads, blas_dir)
    env["LD_LIBRARY_PATH"] = str(Path(tessera).resolve().parents[1] / "lib") + ":" + env["LD_LIBRARY_PATH"]
    proc = subprocess.Popen([tessera, "train", "--config", str(ini),
                             f"--train.metrics_file={metrics}"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    marks = step_marks(proc, metrics)
    if proc.returncode != 0:
        sys.exit(f"gpt_speed: tessera train failed ({proc.returncode}): {proc.stderr.read()[-2000:]}")
    steps_out = []
    for (t0, c0), (t1, c1) in zip(marks, marks[1:]):
        steps_out.append((t1 - t0, None if c0 is None or c1 is None else c1 - c0))
    # The first record has no predecessor: its step (with set-up) counts as warm-up anyway.
    return [(math.nan, math.nan)] + steps_out


_TIES = {}


def tessera_ties(tessera):
    if tessera not in _TIES:
        listing = subprocess.run([tessera, "plugins"], capture_output=True, text=True).stdout
        _TIES[tessera] = "tie_embeddings" in listing
    return _TIES[tessera]


def llmc_source(path, scratch):
    """An llm.c source folder: `path` itself, or a snapshot exported from a git directory."""
    path = Path(path)
    if (path / "train_gpt2.c").exists():
        return path
    exported = scratch / "llm.c"
    if not (exported / "train_gpt2.c").exists():
        exported.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "--git-dir", str(path), "archive", "HEAD"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(exported)], input=archive, check=True)
    return exported


def build_llmc(source, scratch):
    binary = scratch / "llmc_steps"
    subprocess.run(["cc", "-Ofast", "-march=native", "-fopenmp", "-DTESTING", "-I", str(source),
                    "-include", str(source / "train_gpt2.c"), str(REPO / "tools/bench/llmc_steps.c"),
                    "-lm", "-o", str(binary)], check=True, capture_output=True)
    return binary


def write_llmc_checkpoint(path, shape, seq):
    """Random GPT-2 weights in llm.c's checkpoint layout (train_gpt2.c, gpt2_build_from_checkpoint):
    256 int32 header words (magic 20240326, version 3, max_seq_len, vocab, layers, heads, channels,
    padded vocab), then the float32 tensors in its order. Padded vocab = vocab: the same work."""
    import numpy as np

    layers, heads, width, vocab, _, _ = shape
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [20240326, 3, seq, vocab, layers, heads, width, vocab]
    rng = np.random.default_rng(0)
    normal = lambda *dims: rng.standard_normal(dims, dtype=np.float32) * np.float32(0.02)
    ones = lambda *dims: np.ones(dims, dtype=np.float32)
    zeros = lambda *dims: np.zeros(dims, dtype=np.float32)
    L, C = layers, width
    tensors = [normal(vocab, C), normal(seq, C), ones(L, C), zeros(L, C), normal(L, 3 * C, C),
               zeros(L, 3 * C), normal(L, C, C), zeros(L, C), ones(L, C), zeros(L, C),
               normal(L, 4 * C, C), zeros(L, 4 * C), normal(L, C, 4 * C), zeros(L, C), ones(C),
               zeros(C)]
    with open(path, "wb") as out:
        header.tofile(out)
        for t in tensors:
            t.tofile(out)


def run_llmc(binary, checkpoint, shape, threads, steps):
    _, _, _, _, batch, seq = shape
    out = subprocess.run([str(binary), str(checkpoint), str(batch), str(seq), str(steps)],
                         env=blas_env(threads, OPENMP_BLAS), capture_output=True, text=True,
                         check=True)
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("step ")]
    return [(float(r[3]), float(r[5])) for r in rows]


# --- the table -------------------------------------------------------------------------------

def flops_per_token(shape):
    layers, _, width, vocab, _, seq = shape
    matrices = 12 * layers * width * width + vocab * width
    return 6 * matrices + 12 * layers * width * seq


def round_figure(steps, warmup, tokens):
    """Median tokens/s (wall) and tokens/CPU-s over the steps after warm-up."""
    kept = steps[warmup:]
    wall = [s[0] for s in kept if s[0] is not None and not math.isnan(s[0])]
    cpu = [s[1] for s in kept if s[1] is not None and not math.isnan(s[1])]
    return (tokens / statistics.median(wall) if wall else math.nan,
            tokens / statistics.median(cpu) if cpu else math.nan)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="small,124m", help=f"comma-separated: {', '.join(SHAPES)}")
    p.add_argument("--threads", default="1", help="comma-separated thread counts")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=0, help="timed steps per run (default: 8 small, 3 large)")
    p.add_argument("--warmup", type=int, default=2, help="steps dropped at the start of each run")
    p.add_argument("--head", choices=["untied", "tied"], default="tied",
                   help="tie the head to wte on the tessera and PyTorch sides (llm.c always ties)")
    p.add_argument("--tessera", default=str(REPO / "build/ci/bin/tessera"))
    p.add_argument("--baseline", help="another build's bin/tessera (a copy of build/ci's bin/ and lib/): "
                   "adds the contender 'baseline', measured in the same rounds")
    p.add_argument("--llmc", help="an llm.c checkout or git directory (fetched snapshot); absent: skipped")
    p.add_argument("--ranks", type=int, default=1,
                   help="data-parallel ranks, --threads each: tessera ddp over shm against PyTorch "
                        "DDP over gloo, the shape's batch split over them (llm.c skipped)")
    p.add_argument("--contenders", default="tessera,torch,llmc")
    p.add_argument("--blas", default=OPENMP_BLAS, help="folder with the OpenBLAS both sides load")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--worker-shape", help=argparse.SUPPRESS)
    p.add_argument("--worker-rank", default="0,1,0", help=argparse.SUPPRESS)  # rank,world,port
    args = p.parse_args()

    if args.worker == "torch":
        rank, world, port = (int(v) for v in args.worker_rank.split(","))
        torch_worker(tuple(json.loads(args.worker_shape)), int(args.threads), args.steps,
                     args.head == "tied", rank, world, port)
        return
    if args.worker == "gemm":
        gemm_worker(tuple(json.loads(args.worker_shape)), int(args.threads), 10)
        return

    contenders = args.contenders.split(",")
    if args.baseline and "baseline" not in contenders:
        contenders.insert(1, "baseline")
    if args.ranks > 1 and "llmc" in contenders:
        print(f"gpt_speed: --ranks {args.ranks}: llm.c's CPU trainer has no data parallelism: skipped")
        contenders.remove("llmc")
    if "llmc" in contenders and not args.llmc:
        print("gpt_speed: no --llmc DIR given: llm.c skipped (fetch karpathy/llm.c and pass its path)")
        contenders.remove("llmc")
    if "tessera" in contenders and not Path(args.tessera).exists():
        sys.exit(f"gpt_speed: {args.tessera} does not exist; build it (cmake --build build/ci "
                 "--target tessera tessera_model_gpt ...) or pass --tessera")
    scratch = Path(tempfile.mkdtemp(prefix="gpt_speed."))
    llmc_binary = None
    if "llmc" in contenders:
        if not Path(args.llmc).exists():
            print(f"gpt_speed: {args.llmc} does not exist: llm.c skipped")
            contenders.remove("llmc")
        else:
            llmc_binary = build_llmc(llmc_source(args.llmc, scratch), scratch)
    tied = args.head == "tied"
    results = []
    for name in args.shapes.split(","):
        shape = SHAPES[name]
        layers, heads, width, vocab, batch, seq = shape
        tokens = batch * seq
        steps = args.steps or (8 if width <= 256 else 3)
        runs = args.warmup + steps
        checkpoint = scratch / f"llmc_{name}.bin"
        if llmc_binary:
            write_llmc_checkpoint(checkpoint, shape, seq)
        for threads in [int(t) for t in args.threads.split(",")]:
            gemm = subprocess.run([sys.executable, __file__, "--worker", "gemm", "--worker-shape",
                                   json.dumps(shape), "--threads", str(threads)],
                                  env=blas_env(threads, args.blas), capture_output=True, text=True,
                                  check=True)
            gemm_rates = json.loads(gemm.stdout)
            figures = {c: [] for c in contenders}
            loads = []
            for r in range(args.rounds):
                order = contenders if r % 2 == 0 else contenders[::-1]
                for c in order:
                    loads.append(os.getloadavg()[0])
                    if c in ("tessera", "baseline"):
                        binary = args.tessera if c == "tessera" else args.baseline
                        steps_out = run_tessera(binary, shape, threads, runs, tied, args.blas, scratch,
                                                args.ranks)
                    elif c == "torch":
                        steps_out = run_torch(shape, threads, runs, tied, args.blas, args.ranks)
                    else:
                        steps_out = run_llmc(llmc_binary, checkpoint, shape, threads, runs)
                    figures[c].append(round_figure(steps_out, args.warmup, tokens))
                    print(f"  {name} threads {threads} round {r + 1} {c}: "
                          f"{figures[c][-1][0]:.1f} tokens/s, {figures[c][-1][1]:.1f} tokens/CPU-s",
                          file=sys.stderr, flush=True)
            row = {"shape": name, "threads": threads, "ranks": args.ranks, "batch": f"{batch}x{seq}",
                   "head": args.head,
                   "gemm_peak_gflops": {clock: max(r.values()) / 1e9 for clock, r in gemm_rates.items()},
                   "gemm_rates_gflops": {clock: {k: v / 1e9 for k, v in r.items()}
                                         for clock, r in gemm_rates.items()},
                   "load_min": min(loads), "load_max": max(loads)}
            for c in contenders:
                row[c] = {"tokens_per_s": statistics.median(f[0] for f in figures[c]),
                          "tokens_per_cpu_s": statistics.median(f[1] for f in figures[c])}
            results.append(row)
    print_table(results, contenders)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def print_table(results, contenders):
    for clock, key, peak_key in (("wall clock", "tokens_per_s", "wall"),
                                 ("process CPU time", "tokens_per_cpu_s", "cpu")):
        print(f"\ntokens per second by {clock} (medians of rounds)")
        head = ["shape", "batch", "ranks x thr" if any(r.get("ranks", 1) > 1 for r in results) else "thr"] + [f"{c}" for c in contenders]
        peers = [c for c in contenders if c != "tessera"]
        if "tessera" in contenders:
            head += [f"tessera/{c}" for c in peers] + ["MFU tessera", "peak GF/s"]
        print(" | ".join(f"{h:>12}" for h in head))
        for row in results:
            ranks = row.get("ranks", 1)
            cells = [row["shape"], row["batch"],
                     f"{ranks}x{row['threads']}" if ranks > 1 else str(row["threads"])]
            cells += [f"{row[c][key]:.1f}" for c in contenders]
            if "tessera" in contenders:
                ours = row["tessera"][key]
                cells += [f"{ours / row[c][key]:.2f}x" for c in peers]
                shape = SHAPES[row["shape"]]
                peak = row["gemm_peak_gflops"][peak_key] * 1e9
                # By CPU time: tokens per thread-second, times the threads, against the peak rate
                # (any rank count: the CPU time is every rank's). By wall clock: every rank's peak.
                rate = ours * (row["threads"] if key == "tokens_per_cpu_s" else 1)
                peak *= ranks if key == "tokens_per_s" else 1
                cells += [f"{100 * rate * flops_per_token(shape) / peak:.1f} %",
                          f"{peak / 1e9:.1f}"]
            print(" | ".join(f"{c:>12}" for c in cells))
    loads = ", ".join(f"{r['shape']}/{r['threads']}: {r['load_min']:.1f}-{r['load_max']:.1f}" for r in results)
    print(f"\nload average (1 min) while measuring: {loads}; head {results[0]['head'] if results else '-'}")


if __name__ == "__main__":
    main()
