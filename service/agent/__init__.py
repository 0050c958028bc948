"""The GPU host agent: reads NVML, /proc and local vLLM metrics, serves them, registers in Redis.

It makes no judgement and imports no Slack code and no rule packs; the bot fetches its snapshots.
"""
