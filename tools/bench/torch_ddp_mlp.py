#!/usr/bin/env python3
"""PyTorch reference for tools/bench/ddp_throughput.sh: the MLP tessera's `mlp` model builds
(Linear -> ReLU -> ... -> Linear, softmax cross-entropy), SGD with momentum, float32, synthetic
data gathered by a shuffled index per step (as tessera's trainer does).

  torch_ddp_mlp.py --world 2 --threads 1   # DistributedDataParallel over gloo, one process per rank
  torch_ddp_mlp.py --world 1 --threads 2   # one process, no DDP

Prints one JSON line: {"samples_per_s": ..., "steps": ..., "world": ..., "threads": ...},
counted over --steps steps after --warmup steps (global samples: world x batch per step).
"""
import argparse
import json
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--layers", default="784,1024,1024,10")
    p.add_argument("--batch", type=int, default=256, help="samples per rank per step")
    p.add_argument("--steps", type=int, default=100, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--samples", type=int, default=16384, help="synthetic training samples")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--port", type=int, default=29533)
    return p.parse_args()


def build_model(torch, sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def worker(rank, args, result_queue):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1)
    sizes = [int(s) for s in args.layers.split(",")]
    model = build_model(torch, sizes)
    if args.world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                                rank=rank, world_size=args.world)
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    gen = torch.Generator().manual_seed(0)
    inputs = torch.randn(args.samples, sizes[0], generator=gen)
    labels = torch.randint(0, sizes[-1], (args.samples,), generator=gen)
    order = torch.randperm(args.samples, generator=gen)
    per_step = args.batch * args.world

    def step(k):
        start = (k * per_step) % (args.samples - per_step + 1) + rank * args.batch
        index = order[start:start + args.batch]
        x = inputs.index_select(0, index)
        y = labels.index_select(0, index)
        optimizer.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    for k in range(args.warmup):
        step(k)
    if args.world > 1:
        dist.barrier()
    begin = time.perf_counter()
    for k in range(args.warmup, args.warmup + args.steps):
        loss = step(k)
    if args.world > 1:
        dist.barrier()
    seconds = time.perf_counter() - begin
    if rank == 0:
        result_queue.put({"samples_per_s": per_step * args.steps / seconds, "steps": args.steps,
                          "seconds": seconds, "world": args.world, "threads": args.threads,
                          "final_loss": float(loss)})
    if args.world > 1:
        dist.destroy_process_group()


def main():
    args = parse_args()
    import torch.multiprocessing as mp

    if args.world == 1:
        import queue
        q = queue.Queue()
        worker(0, args, q)
    else:
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        procs = [ctx.Process(target=worker, args=(r, args, q)) for r in range(args.world)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=600)
            if proc.exitcode != 0:
                sys.exit(f"torch_ddp_mlp.py: rank process exited with {proc.exitcode}")
    print(json.dumps(q.get()))


if __name__ == "__main__":
    main()
