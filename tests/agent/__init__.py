"""Tests of the GPU host agent (service/agent)."""
