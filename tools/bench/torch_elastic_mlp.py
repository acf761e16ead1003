#!/usr/bin/env python3
"""The job of samples/configs/elastic.ini as a TorchElastic user writes it, for
tools/bench/torchelastic_recovery.sh: Fashion-MNIST, MLP 784-256-256-10 with ReLU, softmax
cross-entropy, Adam (lr 0.001, no weight decay), a cosine schedule over the whole run (no
warm-up, down to 0; the schedule elastic_kills.py gives tessera), gradient-norm clipping at 5.0,
batch 64 per worker, DistributedDataParallel over gloo, one thread per worker.

  torchrun --nnodes=1 --nproc_per_node=2 --max_restarts=3 torch_elastic_mlp.py \
      --data /usr/share/datasets/fashion-mnist --checkpoint-dir DIR --log FILE

torchrun restarts every worker when one fails, so the state has to come from a checkpoint: rank 0
writes one every --checkpoint-every steps (to a temporary file, fsync, rename, fsync of the
folder: a worker killed while writing leaves the previous one whole), and every worker starts
from the newest one it finds. The data order is a pure function of (seed, epoch), so a restart
at step s goes on with the batches of step s + 1.

Rank 0 appends to --log, one JSON line each:
  {"event": "start", "wall_time": ..., "launched": ..., "restart": R, "resumed_from": s}
                                                          once per (re)start, when ready to train
  {"step": s, "wall_time": ..., "loss": ...}                              per completed step
  {"event": "done", "wall_time": ..., "test_accuracy": ...}               at the end
where launched is the process's start (before it imports torch), restart is torchrun's
TORCHELASTIC_RESTART_COUNT and s counts completed steps.
"""
import argparse
import gzip
import json
import math
import os
import time

LAUNCHED = time.time()  # before torch is imported: the restart's cost splits into agent and worker


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=64, help="samples per worker per step")
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--max-grad-norm", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps")
    p.add_argument("--log", required=True, help="JSON Lines file rank 0 appends to")
    return p.parse_args()


def idx(numpy, path):
    """An IDX file (gzip) as a uint8 array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return numpy.frombuffer(data, dtype=numpy.uint8, offset=4 + 4 * dims).reshape(shape)


def newest_checkpoint(folder):
    names = [n for n in os.listdir(folder) if n.startswith("step-") and n.endswith(".pt")]
    if not names:
        return None
    return os.path.join(folder, max(names, key=lambda n: int(n[5:-3])))


def save_checkpoint(torch, folder, step, model, optimizer):
    """Atomic: a reader sees the old newest checkpoint or the whole new one, never a part."""
    final = os.path.join(folder, f"step-{step}.pt")
    temporary = final + ".tmp"
    with open(temporary, "wb") as f:
        torch.save({"step": step, "model": model.state_dict(),
                    "optimizer": optimizer.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(temporary, final)
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    kept = sorted(int(n[5:-3]) for n in os.listdir(folder)
                  if n.startswith("step-") and n.endswith(".pt"))
    for old in kept[:-2]:  # the newest two stay
        os.unlink(os.path.join(folder, f"step-{old}.pt"))

def main():
    args = parse_args()
    import numpy
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # torchrun's env:// rendezvous (MASTER_ADDR, RANK, ...)
    rank, world = dist.get_rank(), dist.get_world_size()
    log = open(args.log, "a", buffering=1) if rank == 0 else None

    def emit(record):
        if log:
            log.write(json.dumps(record) + "\n")

    load = lambda name: idx(numpy, os.path.join(args.data, name))
    x_train = load("train-images-idx3-ubyte.gz").reshape(-1, 784).astype(numpy.float32) / 255.0
    y_train = load("train-labels-idx1-ubyte.gz").astype(numpy.int64)
    x_test = load("t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(numpy.float32) / 255.0
    y_test = load("t10k-labels-idx1-ubyte.gz").astype(numpy.int64)

    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    step = 0
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    newest = newest_checkpoint(args.checkpoint_dir)
    if newest:
        state = torch.load(newest)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    ddp = torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's parameters
    emit({"event": "start", "wall_time": time.time(), "launched": LAUNCHED,
          "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
          "resumed_from": step, "world": world})

    # Each epoch a permutation from (seed, epoch), dealt out as DistributedSampler does.
    global_batch = args.batch * world
    steps_per_epoch = len(x_train) // global_batch
    total = steps_per_epoch * args.epochs
    order_epoch, order = -1, None
    while step < total:
        epoch, position = divmod(step, steps_per_epoch)
        if epoch != order_epoch:
            order_epoch = epoch
            order = numpy.random.default_rng([args.seed, epoch]).permutation(len(x_train))
        start = position * global_batch + rank * args.batch
        rows = order[start:start + args.batch]
        xb, yb = torch.from_numpy(x_train[rows]), torch.from_numpy(y_train[rows])
        lr = 0.5 * args.lr * (1 + math.cos(math.pi * (step + 1) / total))
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = F.cross_entropy(ddp(xb), yb)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), args.max_grad_norm)
        optimizer.step()
        step += 1
        emit({"step": step, "wall_time": time.time(), "loss": round(loss.item(), 5)})
        if rank == 0 and args.checkpoint_every > 0 and step % args.checkpoint_every == 0:
            save_checkpoint(torch, args.checkpoint_dir, step, model, optimizer)

    if rank == 0:
        with torch.no_grad():
            predicted = model(torch.from_numpy(x_test)).argmax(dim=1).numpy()
        accuracy = 100.0 * float((predicted == y_test).mean())
        emit({"event": "done", "wall_time": time.time(), "test_accuracy": round(accuracy, 2)})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
