"""A tiny data-parallel training job that checkpoints and honours preemption.

Example and test workload for the ``elastic-torchrun`` template: a linear
regression on deterministic data (the batch of step ``s`` depends only on
``s``), gradients averaged with an all-reduce, so a run that resumes from
a checkpoint continues the exact loss curve.  Rank 0 appends one JSON line
per step (``step``, ``loss``, ``world``, ``restart``) to ``--loss-log``.

    torchrun ... tiny_train.py --steps 300 --loss-log loss.jsonl [--checkpoint-every 50]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from slurmopt.elastic.checkpoint import CheckpointManager
from slurmopt.elastic.runtime import (
    JobEnv,
    acknowledge,
    agree,
    checkpoint_requested,
    mark_preempted,
    torch_all_reduce_max,
)

FEATURES = 8
GLOBAL_BATCH = 16


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole (global) batch of ``step``: the same on every run and world size."""
    gen = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, FEATURES, generator=gen)
    true_w = torch.arange(1, FEATURES + 1, dtype=torch.float32) / FEATURES
    y = x @ true_w + 0.01 * torch.randn(GLOBAL_BATCH, generator=gen)
    return x, y


def reference_losses(steps: int) -> list[float]:
    """The loss of every step of an uninterrupted run, computed in one process (for tests)."""
    model, opt = _model()
    out = []
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        loss = ((model(x).squeeze(-1) - y) ** 2).sum() / GLOBAL_BATCH
        loss.backward()
        opt.step()
        out.append(float(loss.detach()))
    return out


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def serialise(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> bytes:
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, buf)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--loss-log", type=Path, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    args = parser.parse_args(argv)

    env = JobEnv.from_environ()
    dist.init_process_group("gloo", timeout=timedelta(seconds=env.collective_timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)

    model, opt = _model()
    ckpt = CheckpointManager(env.ckpt_dir, env.shared_dir)
    start = 0
    found = ckpt.resume()
    if found is not None:
        state = torch.load(io.BytesIO(found.read("state.pt")), weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = int(state["step"])
        if rank == 0:
            print(f"resumed from step {start} ({found.path})", file=sys.stderr)

    log_fh = args.loss_log.open("a") if rank == 0 else None
    step = start
    while step < args.steps:
        if agree(checkpoint_requested(env.ckpt_dir), torch_all_reduce_max):
            if rank == 0:
                ckpt.save(step, {"state.pt": serialise(model, opt, step)}, wait=True)
                if env.job_id is not None:
                    acknowledge(env.job_id, step)
                mark_preempted(env.ckpt_dir)
                print(f"checkpointed at step {step} for preemption", file=sys.stderr)
            dist.barrier()
            dist.destroy_process_group()
            return 0
        x, y = batch(step)
        shard = slice(rank * GLOBAL_BATCH // world, (rank + 1) * GLOBAL_BATCH // world)
        opt.zero_grad()
        pred = model(x[shard]).squeeze(-1)
        loss = ((pred - y[shard]) ** 2).sum() / GLOBAL_BATCH
        loss.backward()
        for param in model.parameters():
            assert param.grad is not None
            dist.all_reduce(param.grad)
        total = loss.detach().clone()
        dist.all_reduce(total)
        opt.step()
        step += 1
        if log_fh is not None:
            record = {"step": step, "loss": float(total), "world": world, "restart": restart}
            log_fh.write(json.dumps(record) + "\n")
            log_fh.flush()
        if args.checkpoint_every and step % args.checkpoint_every == 0 and rank == 0:
            ckpt.save(step, {"state.pt": serialise(model, opt, step)})
        if args.step_sleep:
            time.sleep(args.step_sleep)
    if rank == 0:
        ckpt.wait()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without C++ static destructors: torch's gloo threads can still be joinable at
    # interpreter exit, which aborts the process ("terminate called without an active
    # exception") after all the work is done and saved.  Everything is flushed above.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
