"""slurmopt: a topology- and fragmentation-aware scheduling sidecar for Slurm GPU clusters."""

__version__ = "0.1.0"
