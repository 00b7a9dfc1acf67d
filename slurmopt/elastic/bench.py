"""All-reduce bandwidth benchmark over torch.distributed (NCCL on GPUs, gloo on CPU).

Run under torchrun (the ``nccl-allreduce-bench`` template does).  Rank 0
prints one JSON document: per message size, the mean time and the
algorithm and bus bandwidths as nccl-tests defines them (bus = alg x
2(n-1)/n).  Sizes double from ``--min-bytes`` to ``--max-bytes`` (256 MB).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torch.distributed as dist

MAX_BYTES = 256 * 1024 * 1024


def sizes(low: int, high: int) -> list[int]:
    """Message sizes in bytes, doubling from ``low`` up to ``high`` (float32 multiples)."""
    out, size = [], max(4, low)
    while size <= high:
        out.append(size)
        size *= 2
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=MAX_BYTES)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args(argv)
    if args.max_bytes > MAX_BYTES:
        parser.error(f"--max-bytes is at most {MAX_BYTES}")
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if use_cuda else None
    if device is not None:
        torch.cuda.set_device(device)
    results = []
    for size in sizes(args.min_bytes, args.max_bytes):
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(tensor)
        if use_cuda:
            torch.cuda.synchronize()
        dist.barrier()
        began = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(tensor)
        if use_cuda:
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - began) / args.iters
        alg = size / seconds / 1e9
        results.append(
            {
                "bytes": size,
                "time_us": seconds * 1e6,
                "algbw_gbps": alg,
                "busbw_gbps": alg * 2 * (world - 1) / world,
            }
        )
    if rank == 0:
        doc = {"backend": dist.get_backend(), "world_size": world, "results": results}
        print(json.dumps(doc))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
