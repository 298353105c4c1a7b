"""Executors: where an AgentRun's runtime process runs (see base.py for the seam)."""
