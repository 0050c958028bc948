"""Any model: the resolution chain that turns a model name into the config.json the core sizes.

Catalog → pasted config.json → a local path or the Hugging Face cache → the Hub (`huggingface_hub`,
honouring HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE) → the model a GPU host's agent read from disk. This is
a shell package: it does the file and network I/O so the core's `estimate()` stays pure. The API and
the CLI resolve before calling the core (`service.models.chain`), and `cite` names the step in the
answer's sources. This `__init__` imports nothing, so the GPU host agent can use
`service.models.local` without pulling in the core.
"""
