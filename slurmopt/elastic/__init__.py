"""The in-job runtime: checkpoints, the preemption request, the acknowledgement.

Runs inside the training job (no database, no daemon): the batch shell
turns the checkpoint signal into a flag file, every rank checks it each
step and agrees through an all-reduce, rank 0 saves and acknowledges in the
job's own comment.  See ``docs/preemption.md``.
"""
