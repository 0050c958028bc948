"""Scrapes Prometheus text: the local vLLM servers' serving signals and, optionally, dcgm-exporter.

vLLM V1 logs no line when it preempts a request, so `/metrics` is the only way to see preemption
under load. Metric names follow the fact sheet §7: `vllm:kv_cache_usage_perc` (0.9.2+) or
`vllm:gpu_cache_usage_perc` (V0, and V1 up to 0.11), `vllm:num_requests_running/waiting`,
`vllm:num_preemptions_total`; V1 labels every sample with `model_name` and `engine`, and a server
with several engines (data parallel) reports one sample per engine, which are combined here.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, TextIO, cast

import httpx
import msgspec
from prometheus_client.parser import text_fd_to_metric_families

from service.schemas import GpuInfo, MigInstance, SnapshotError, VllmServer

__all__ = [
    "DcgmReading",
    "MetricsFormatError",
    "Sample",
    "dcgm_gpus",
    "parse_prometheus",
    "scrape_dcgm",
    "scrape_vllm",
    "scrape_vllm_servers",
    "vllm_server",
]

MIB_PER_GIB = 1024.0
_MAX_BODY_BYTES = 8 * 2**20


class MetricsFormatError(ValueError):
    """The text is not in the Prometheus exposition format; the message names the line."""


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class _CountedLines:
    """The text's lines, counting how many the parser took: its errors name a line's text, not its number."""

    def __init__(self, text: str) -> None:
        self._lines = iter(text.splitlines())
        self.taken = 0

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.taken += 1
        return line


def parse_prometheus(text: str) -> list[Sample]:
    """Samples of Prometheus text exposition, read by prometheus_client's parser (labels, escapes,
    NaN, ±Inf, timestamps); a malformed line raises MetricsFormatError naming its number."""
    lines = _CountedLines(text)
    samples: list[Sample] = []
    try:
        for family in text_fd_to_metric_families(cast("TextIO", lines)):
            samples.extend(Sample(s.name, dict(s.labels), float(s.value)) for s in family.samples)
    except ValueError as err:
        detail = str(err) or "not a sample, comment or blank line"
        raise MetricsFormatError(f"line {lines.taken}: {detail[:120]}") from None
    return samples


# --- vLLM --------------------------------------------------------------------------------------


def _values(samples: Iterable[Sample], name: str) -> list[float]:
    return [s.value for s in samples if s.name == name and not math.isnan(s.value)]


def _total(samples: Sequence[Sample], *names: str) -> int | None:
    for name in names:
        values = _values(samples, name)
        if values:
            return int(sum(values))
    return None


def vllm_server(url: str, samples: Sequence[Sample]) -> VllmServer | None:
    """The serving signals in one vLLM `/metrics` page; None when it holds no vLLM metric."""
    vllm = [s for s in samples if s.name.startswith("vllm:")]
    if not vllm:
        return None
    usage = _values(vllm, "vllm:kv_cache_usage_perc") or _values(vllm, "vllm:gpu_cache_usage_perc")
    models = sorted({s.labels["model_name"] for s in vllm if s.labels.get("model_name")})
    v0_only = {"vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc"}
    era: Literal["v0", "v1"] = "v0" if any(s.name in v0_only for s in vllm) else "v1"
    return VllmServer(
        url=url,
        model=", ".join(models) or None,
        # engines hold equal KV caches, so the mean is the share of all blocks in use
        kv_cache_usage=round(sum(usage) / len(usage), 4) if usage else None,
        requests_running=_total(vllm, "vllm:num_requests_running"),
        requests_waiting=_total(vllm, "vllm:num_requests_waiting"),
        preemptions_total=_total(vllm, "vllm:num_preemptions_total", "vllm:num_preemptions"),
        metrics_era=era,
    )


def metrics_url(url: str) -> str:
    """Accept a server's base URL or its /metrics URL."""
    trimmed = url.rstrip("/")
    return trimmed if trimmed.endswith("/metrics") else f"{trimmed}/metrics"


async def _fetch(client: httpx.AsyncClient, url: str) -> str:
    """The page's text, read in chunks so a huge or endless body is cut off at the limit."""
    async with client.stream("GET", url) as response:
        if response.status_code != 200:
            raise httpx.HTTPStatusError(
                f"HTTP {response.status_code}", request=response.request, response=response
            )
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > _MAX_BODY_BYTES:
                raise MetricsFormatError(f"the page is larger than {_MAX_BODY_BYTES // 2**20} MiB")
    return body.decode(response.encoding or "utf-8", errors="replace")


def _failure(url: str, err: BaseException) -> str:
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]  # anyio groups connect errors; the first one says what happened
    if isinstance(err, httpx.TimeoutException):
        return f"{url} did not answer within the scrape timeout"
    if isinstance(err, httpx.ConnectError):
        return f"nothing answered at {url} (is the vLLM server running there?)"
    if isinstance(err, httpx.HTTPStatusError):
        return f"{url} answered {err} instead of metrics"
    if isinstance(err, MetricsFormatError):
        return f"{url} did not return Prometheus text: {err}"
    return f"{url} could not be scraped: {err}"


async def scrape_vllm(client: httpx.AsyncClient, url: str) -> VllmServer | SnapshotError:
    source = f"vllm:{url}"
    target = metrics_url(url)
    try:
        samples = parse_prometheus(await _fetch(client, target))
    except Exception as err:  # every failure becomes an error entry (connect errors may come grouped)
        return SnapshotError(source=source, reason=_failure(target, err))
    server = vllm_server(url, samples)
    if server is None:
        return SnapshotError(source=source, reason=f"{target} has no vllm: metrics (not a vLLM server?)")
    return msgspec.structs.replace(server, version=await served_version(client, url))


class _Version(msgspec.Struct):
    version: str


async def served_version(client: httpx.AsyncClient, url: str) -> str | None:
    """What the server's `GET /version` says (vLLM's OpenAI server has it); None when it says nothing
    usable: pre-flight then asks the person for the version instead."""
    base = url.rstrip("/").removesuffix("/metrics")
    try:
        text = await _fetch(client, f"{base}/version")
        return msgspec.json.decode(text, type=_Version).version.strip()[:64] or None
    except Exception:  # any failure means "not known", which the answer says
        return None


async def scrape_vllm_servers(
    urls: Sequence[str], timeout_s: float
) -> tuple[list[VllmServer], list[SnapshotError]]:
    """Scrape every server at once; each failure is an error entry, never an exception."""
    if not urls:
        return [], []
    async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client:
        results = await asyncio.gather(*(scrape_vllm(client, url) for url in urls))
    servers = [r for r in results if isinstance(r, VllmServer)]
    errors = [r for r in results if isinstance(r, SnapshotError)]
    return servers, errors


# --- dcgm-exporter -----------------------------------------------------------------------------


@dataclass(slots=True)
class DcgmReading:
    driver_version: str | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    errors: list[SnapshotError] = field(default_factory=list)


@dataclass(slots=True)
class _DcgmDevice:
    labels: dict[str, str]
    values: dict[str, float] = field(default_factory=dict)


def _fb(values: dict[str, float], part: str) -> float | None:
    value = values.get(f"DCGM_FI_DEV_FB_{part}")
    return value if value is not None and math.isfinite(value) else None


def _gib_from_mib(mib: float) -> float:
    return round(mib / MIB_PER_GIB, 3)


def dcgm_gpus(samples: Sequence[Sample]) -> DcgmReading:
    """GPUs from dcgm-exporter framebuffer metrics (MiB), one per `gpu` label; MIG rows nest."""
    devices: dict[tuple[int, str | None], _DcgmDevice] = {}
    reading = DcgmReading()
    for s in samples:
        if not s.name.startswith("DCGM_FI_") or not s.labels.get("gpu", "").isdigit():
            continue
        key = (int(s.labels["gpu"]), s.labels.get("GPU_I_ID"))
        device = devices.setdefault(key, _DcgmDevice(labels=s.labels))
        device.values[s.name] = s.value
        reading.driver_version = reading.driver_version or s.labels.get("DCGM_FI_DRIVER_VERSION")
    for index in sorted({key[0] for key in devices}):
        whole = devices.get((index, None))
        slots = sorted((k[1] for k in devices if k[0] == index and k[1] is not None), key=_slot_order)
        parts = [devices[(index, slot)] for slot in slots]
        instances = [_dcgm_instance(slot, part) for slot, part in zip(slots, parts, strict=True)]
        if whole is None and parts:
            whole = _sum_instances(parts)
        gpu = _dcgm_gpu(index, whole, [i for i in instances if i is not None], reading.errors)
        if gpu is not None:
            reading.gpus.append(gpu)
    if not devices:
        reading.errors.append(SnapshotError(source="dcgm", reason="dcgm-exporter reported no GPU"))
    return reading


def _slot_order(slot: str) -> tuple[int, str]:
    return (int(slot), "") if slot.isdigit() else (-1, slot)


def _sum_instances(parts: Sequence[_DcgmDevice]) -> _DcgmDevice:
    """A GPU in MIG mode reported only per instance: its framebuffer is the sum of theirs."""
    values: dict[str, float] = {}
    for part in parts:
        for name, value in part.values.items():
            if name.startswith("DCGM_FI_DEV_FB_"):
                values[name] = values.get(name, 0.0) + value
    return _DcgmDevice(labels=parts[0].labels, values=values)


def _dcgm_instance(slot: str, device: _DcgmDevice) -> MigInstance | None:
    used, free = _fb(device.values, "USED"), _fb(device.values, "FREE")
    if used is None or free is None:
        return None
    reserved = _fb(device.values, "RESERVED") or 0.0
    labels = device.labels
    return MigInstance(
        index=int(slot) if slot.isdigit() else 0,
        uuid=device.labels.get("UUID", "unknown"),
        name=f"{labels.get('modelName', 'unknown')} MIG {labels.get('GPU_I_PROFILE', '')}".strip(),
        total_gib=_gib_from_mib(used + free + reserved),
        used_gib=_gib_from_mib(used),
        free_gib=_gib_from_mib(free),
    )


def _dcgm_gpu(
    index: int, whole: _DcgmDevice | None, instances: list[MigInstance], errors: list[SnapshotError]
) -> GpuInfo | None:
    if whole is None:
        return None
    used, free = _fb(whole.values, "USED"), _fb(whole.values, "FREE")
    if used is None or free is None:
        reason = (
            f"GPU {index} has no DCGM_FI_DEV_FB_USED/FREE samples (enable them in the exporter's counters)"
        )
        errors.append(SnapshotError(source=f"dcgm:gpu{index}", reason=reason))
        return None
    reserved = _fb(whole.values, "RESERVED")
    total = _fb(whole.values, "TOTAL") or (used + free + (reserved or 0.0))
    util = whole.values.get("DCGM_FI_DEV_GPU_UTIL")
    return GpuInfo(
        index=index,
        uuid=whole.labels.get("UUID", "unknown"),
        name=whole.labels.get("modelName", "unknown"),
        total_gib=_gib_from_mib(total),
        used_gib=_gib_from_mib(used),
        free_gib=_gib_from_mib(free),
        reserved_gib=_gib_from_mib(reserved) if reserved is not None else None,
        utilization_pct=int(util) if util is not None and math.isfinite(util) else None,
        compute_capability=None,
        mig_mode=bool(instances) or None,
        memory_api="dcgm",
        mig_instances=instances,
    )


async def scrape_dcgm(url: str, timeout_s: float) -> DcgmReading:
    """GPU memory from a dcgm-exporter endpoint; failures become error entries."""
    target = metrics_url(url)
    try:
        async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client:
            samples = parse_prometheus(await _fetch(client, target))
    except Exception as err:  # every failure, expected or not, becomes an error entry
        reason = _failure(target, err).replace("vLLM server", "dcgm-exporter") + "; no GPU could be read"
        return DcgmReading(errors=[SnapshotError(source=f"dcgm:{url}", reason=reason)])
    return dcgm_gpus(samples)
