"""Speed, memory and policy benchmarks: tables and JSON, ratios against a baseline run alongside."""
