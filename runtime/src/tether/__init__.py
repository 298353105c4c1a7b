"""Tether: durable runtime for AI agents."""
