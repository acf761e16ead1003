#!/usr/bin/env python3
"""PyTorch on one GPU running the main job's training (samples/configs/ddp.ini at one rank):
Fashion-MNIST, MLP 784-256-256-10 with ReLU, softmax cross-entropy, Adam (lr 0.001, no weight
decay), cosine schedule with 100 warm-up steps down to 5e-5, gradient-norm clipping at 5.0,
global batch 128, 10 epochs, a reshuffled order each epoch. The batches are copied from host
memory to the GPU step by step, as tessera's trainer does, and the training time covers the
same work: every step, then the test set's accuracy. Prints one JSON line.

usage: torch_fashion_mnist.py --data /usr/share/datasets/fashion-mnist [--device cuda]
"""
import argparse
import gzip
import json
import math
import os
import time

import numpy as np
import torch


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=128)
    args = p.parse_args()
    torch.manual_seed(1)
    rng = np.random.default_rng(1)
    load = lambda name: idx(os.path.join(args.data, name))
    x_train = load("train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255.0
    y_train = load("train-labels-idx1-ubyte.gz").astype(np.int64)
    x_test = load("t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255.0
    y_test = load("t10k-labels-idx1-ubyte.gz").astype(np.int64)

    device = torch.device(args.device)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    steps_per_epoch = len(x_train) // args.batch
    total = steps_per_epoch * args.epochs
    warmup, base, floor = 100, 1e-3, 5e-5

    def lr_at(step):
        if step < warmup:
            return base * (step + 1) / warmup
        t = (step - warmup) / max(1, total - warmup)
        return floor + 0.5 * (base - floor) * (1 + math.cos(math.pi * t))

    torch.cuda.synchronize() if device.type == "cuda" else None
    start = time.perf_counter()
    step = 0
    for _ in range(args.epochs):
        order = rng.permutation(len(x_train))
        for s in range(steps_per_epoch):
            rows = order[s * args.batch:(s + 1) * args.batch]
            xb = torch.from_numpy(x_train[rows]).to(device)
            yb = torch.from_numpy(y_train[rows]).to(device)
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            step += 1
    with torch.no_grad():
        correct = 0
        for i in range(0, len(x_test), 1000):
            xb = torch.from_numpy(x_test[i:i + 1000]).to(device)
            yb = torch.from_numpy(y_test[i:i + 1000]).to(device)
            correct += (model(xb).argmax(1) == yb).sum().item()
    torch.cuda.synchronize() if device.type == "cuda" else None
    seconds = time.perf_counter() - start
    print(json.dumps({"test_accuracy": correct / len(x_test), "steps": step,
                      "seconds": round(seconds, 3),
                      "samples_per_s": round(step * args.batch / seconds, 1),
                      "torch": torch.__version__, "device": str(device)}), flush=True)


if __name__ == "__main__":
    main()
