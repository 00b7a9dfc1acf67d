"""The long-running side of slurmopt: what the daemon needs from its host.

``notify`` speaks systemd's sd_notify protocol (readiness, watchdog pings,
status) without linking libsystemd; ``heartbeat`` writes the file the Slurm
job-submit plugin reads to decide whether slurmopt is alive and enforcing.
"""
