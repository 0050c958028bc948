"""Wire values for rendering tests, shaped like what the service sends for real logs."""

from __future__ import annotations

from service.schemas import (
    Budget,
    Diagnosis,
    Engine,
    Evidence,
    Facts,
    FigureSource,
    Finding,
    Fix,
    StartupCheck,
)

RULES = "sha256:3f9a1c0e5b7d2e4f6a8b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f"


def qwen_budget(*, fits: bool = False) -> Budget:
    """Qwen2.5-0.5B-Instruct on an L4 at 0.15 utilization: weights fit, the KV cache does not."""
    return Budget(
        model="Qwen/Qwen2.5-0.5B-Instruct",
        gpu="L4",
        gpus=1,
        total_gib=22.03,
        dtype="bfloat16",
        quantization=None,
        kv_cache_dtype="auto",
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        gpu_memory_utilization=0.9 if fits else 0.15,
        block_size=16,
        max_model_len=32768,
        vllm_version="0.8.5",
        weights_gib=0.93,
        kv_bytes_per_token=12288,
        kv_bytes_per_block=196608,
        activation_peak_gib=1.39,
        non_torch_gib=0.12,
        cuda_graph_gib=0.0,
        requested_gib=19.83 if fits else 3.3,
        available_kv_gib=17.39 if fits else 0.86,
        num_blocks=94976 if fits else 4697,
        kv_cache_tokens=1519616 if fits else 75152,
        max_model_len_fit=32768 if fits else 75152,
        max_concurrency=46.38 if fits else 2.29,
        startup_check=StartupCheck(free_gib=21.6, requested_gib=19.83 if fits else 3.3, passes=True),
        fits=fits,
        verdict=(
            "Fits: 17.4 GiB of KV cache holds 46 requests of 32,768 tokens."
            if fits
            else "Fits only 2.3 requests of 32,768 tokens; raise gpu_memory_utilization."
        ),
        min_gpu_memory_utilization=0.12,
        sources={
            "weights_gib": FigureSource(kind="catalog"),
            "activation_peak_gib": FigureSource(kind="estimated", uncertainty_gib=0.3),
        },
        notes=["Activation peak is estimated from max_num_batched_tokens=8192."],
    )


def _fixes(count: int) -> list[Fix]:
    base = [
        Fix(
            id="lower-max-model-len",
            rank=1,
            title="Shorten the context to what fits",
            change="--max-model-len 1344",
            why="vLLM estimated 1344 tokens fit in the KV cache (line 812).",
            tradeoff="Requests longer than 1344 tokens are rejected.",
            source=["line 812"],
        ),
        Fix(
            id="raise-gpu-memory-utilization",
            rank=2,
            title="Give vLLM more of the GPU",
            change="--gpu-memory-utilization 0.95",
            why="0.95 × 22.03 GiB leaves 1.1 GiB for other processes, which the snapshot shows is enough.",
            tradeoff="Less headroom for other processes on this GPU.",
            source=["budget"],
        ),
        Fix(
            id="fp8-kv-cache",
            rank=3,
            title="Store the KV cache in fp8",
            change="--kv-cache-dtype fp8",
            why="Halves the bytes per token (12,288 → 6,144).",
            tradeoff="Small accuracy loss on long contexts.",
            exact=False,
        ),
        Fix(
            id="stop-other-process",
            rank=4,
            title="Stop the notebook holding 6.2 GiB",
            change="kill 5230",
            why="pid 5230 (python -m ipykernel_launcher) holds 6.2 GiB on GPU 0.",
            tradeoff="Ends that person's session.",
            needs=["snapshot"],
        ),
        Fix(
            id="add-tensor-parallel",
            rank=5,
            title="Split across two GPUs",
            change="--tensor-parallel-size 2",
            why="Halves the weights per GPU.",
            tradeoff="Needs a second GPU.",
        ),
    ]
    out = list(base)
    while len(out) < count:
        n = len(out) + 1
        out.append(
            Fix(
                id=f"extra-{n}",
                rank=n,
                title=f"Extra fix {n}",
                change=f"--max-num-seqs {n}",
                why="w",
                tradeoff="t",
            )
        )
    return out[:count]


def kv_capacity_diagnosis(*, fixes: int = 5, with_budget: bool = True) -> Diagnosis:
    return Diagnosis(
        phase="kv_cache_capacity",
        confidence=0.95,
        title="max_model_len 32768 does not fit the KV cache",
        summary="The KV cache holds 1344 tokens, fewer than one request of max_model_len 32768.",
        evidence=[
            Evidence(
                line=805,
                text="INFO 11-29 10:00:05 [gpu_worker.py:276] Available KV cache memory: 0.02 GiB",
                rule="vllm-kv-available",
            ),
            Evidence(
                line=812,
                text=(
                    "ValueError: To serve at least one request with the models's max seq len (32768), "
                    "(0.38 GiB KV cache is needed, which is larger than the available KV cache memory "
                    "(0.02 GiB). Based on the available memory, the estimated maximum model length is 1344."
                ),
                rule="vllm-kv-estimated-max-len",
            ),
        ],
        facts=Facts(
            vllm_version="0.8.5",
            model="Qwen/Qwen2.5-0.5B-Instruct",
            max_model_len=32768,
            estimated_max_model_len=1344,
            available_kv_cache_gib=0.02,
            needed_kv_cache_gib=0.38,
            gpu_memory_utilization=0.15,
        ),
        findings=[
            Finding(rule="vllm-kv-estimated-max-len", phase="kv_cache_capacity", severity="error", line=812)
        ],
        budget=qwen_budget() if with_budget else None,
        fixes=_fixes(fixes),
        rules_version=RULES,
        engine=Engine(version="0.8.5", assumed=False),
        fact_sources={"max_model_len": "line 812"},
    )
