#!/usr/bin/env python3
"""PyTorch's NCCL collectives on one GPU, measured the way `tessera bench collectives` measures.

Each operation is issued and waited for in turn (torch.cuda.synchronize after each, as tessera's
Work::wait blocks the host), k operations a batch so that a batch takes about 20 ms, 15 batches;
the median batch gives time per operation. bytes, algbw and busbw follow nccl-tests' definitions
(tools/tessera/collective_bench.hpp). Prints one JSON line per op and size, like
`tessera bench collectives --json`.

usage: torch_nccl_collectives.py [--sizes 4KiB,1MiB,...] [--ops all_reduce,...]
"""
import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "B": 1}


def parse_size(text):
    for unit, factor in UNITS.items():
        if text.endswith(unit):
            return int(text[: -len(unit)]) * factor
    return int(text)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="4KiB,64KiB,1MiB,16MiB,64MiB,256MiB")
    parser.add_argument("--ops", default="all_reduce,reduce_scatter,all_gather,broadcast")
    parser.add_argument("--repetitions", type=int, default=15)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        dist.init_process_group("nccl", init_method="file://" + os.path.join(folder, "rdzv"),
                                rank=0, world_size=1)
        n = dist.get_world_size()
        for op in args.ops.split(","):
            for size in args.sizes.split(","):
                count = parse_size(size) // 4
                count -= count % n
                data = torch.ones(count, dtype=torch.float32, device="cuda")
                out = torch.zeros(count, dtype=torch.float32, device="cuda")

                def once():
                    if op == "all_reduce":
                        dist.all_reduce(data)
                    elif op == "reduce_scatter":
                        dist.reduce_scatter_tensor(out[: count // n], data)
                    elif op == "all_gather":
                        dist.all_gather_into_tensor(out, data[: count // n])
                    else:
                        dist.broadcast(data, 0)
                    torch.cuda.synchronize()

                once()
                start = time.perf_counter()
                once()
                one = time.perf_counter() - start
                k = max(1, min(10000, int(0.02 / one) if one > 0 else 1000))
                times = []
                for _ in range(args.repetitions):
                    start = time.perf_counter()
                    for _ in range(k):
                        once()
                    times.append((time.perf_counter() - start) / k)
                median = statistics.median(times)
                algbw = count * 4 / median / 1e9
                factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(op, (n - 1) / n)
                print(json.dumps({"op": op, "bytes": count * 4,
                                  "time_us_median": round(median * 1e6, 3),
                                  "time_us_min": round(min(times) * 1e6, 3),
                                  "algbw_gbps": round(algbw, 3),
                                  "busbw_gbps": round(algbw * factor, 3),
                                  "torch": torch.__version__,
                                  "nccl": ".".join(map(str, torch.cuda.nccl.version()))}),
                      flush=True)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
