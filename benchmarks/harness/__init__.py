"""The benchmark harness behind benchmarks/run.py (server, scenarios, execution, report)."""
