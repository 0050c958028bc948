"""Prometheus text parsing and the vLLM / dcgm-exporter scrapes, against a real local HTTP server."""

from __future__ import annotations

import math

import pytest

from service.agent.metrics import (
    MetricsFormatError,
    dcgm_gpus,
    metrics_url,
    parse_prometheus,
    scrape_dcgm,
    scrape_vllm_servers,
    vllm_server,
)
from service.schemas import VllmServer


def test_parser_reads_labels_escapes_and_special_values() -> None:
    text = (
        "# HELP odd A help line with \\\\ and \\n escapes\n"
        "# TYPE odd gauge\n"
        'odd{path="C:\\\\models",quote="say \\"hi\\"",nl="a\\nb",} NaN\n'
        'inf_metric{le="+Inf"} +Inf 1700000000000\n'
        "neg -Inf\n"
        "   \n"
        "plain 1.5e+03\n"
        "empty{} 0\n"
    )
    odd, inf_metric, neg, plain, empty = parse_prometheus(text)
    assert odd.labels == {"path": "C:\\models", "quote": 'say "hi"', "nl": "a\nb"}
    assert math.isnan(odd.value)
    assert (inf_metric.labels, inf_metric.value) == ({"le": "+Inf"}, math.inf)
    assert neg.value == -math.inf
    assert (plain.name, plain.value) == ("plain", 1500.0)
    assert (empty.labels, empty.value) == ({}, 0.0)


def test_parser_keeps_commas_and_braces_inside_label_values() -> None:
    [sample] = parse_prometheus('m{a="x,y}",b="{z}"} 2\n')
    assert sample.labels == {"a": "x,y}", "b": "{z}"}


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('m{a="unterminated} 1', "line 1"),
        ("ok 1\nm{a=b} 1", "line 2"),
        ("m not-a-number", "line 1"),
        ("<html>", "line 1"),
        ("# TYPE a gauge\na 1\n\n<!doctype html>", "line 4"),
        ('a 1\nb{x="1",,y="2"} 2', "line 2"),
    ],
)
def test_parser_names_the_line_of_malformed_text(text: str, where: str) -> None:
    with pytest.raises(MetricsFormatError, match=where):
        parse_prometheus(text)


def test_metrics_url_accepts_base_or_metrics_url() -> None:
    assert metrics_url("http://h:8000") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/metrics/") == "http://h:8000/metrics"


async def test_v0_server_reports_kv_usage_requests_and_preemptions(metrics_server: str) -> None:
    url = f"{metrics_server}/v0"
    servers, errors = await scrape_vllm_servers([url], timeout_s=2.0)
    assert errors == []
    assert servers == [
        VllmServer(
            url=url,
            model="meta-llama/Llama-3.1-8B-Instruct",
            kv_cache_usage=0.9874,
            requests_running=38,
            requests_waiting=11,
            preemptions_total=213,
            metrics_era="v0",
        )
    ]


async def test_v1_server_sums_engines_and_prefers_the_new_kv_metric(metrics_server: str) -> None:
    url = f"{metrics_server}/v1"
    [server], errors = await scrape_vllm_servers([url], timeout_s=2.0)
    assert errors == []
    assert server.model == "Qwen/Qwen2.5-32B-Instruct"
    assert server.metrics_era == "v1"
    assert (server.requests_running, server.requests_waiting) == (125, 26)
    assert server.preemptions_total == 2609
    assert server.kv_cache_usage == 0.9835
    assert server.version == "0.11.0"


async def test_a_server_without_a_version_page_reports_no_version(metrics_server: str) -> None:
    [server], errors = await scrape_vllm_servers([f"{metrics_server}/v1-0.8"], timeout_s=2.0)
    assert errors == [] and server.version is None  # pre-flight then asks for it


async def test_v1_before_092_reads_the_old_kv_metric_name(metrics_server: str) -> None:
    [server], _ = await scrape_vllm_servers([f"{metrics_server}/v1-0.8"], timeout_s=2.0)
    assert (server.kv_cache_usage, server.requests_running, server.preemptions_total) == (0.4312, 256, 0)
    assert server.metrics_era == "v1"


async def test_failed_scrapes_are_error_entries_and_the_rest_still_reads(metrics_server: str) -> None:
    urls = [f"{metrics_server}/{p}" for p in ("v0", "broken", "html", "not-vllm", "slow", "huge")]
    urls.append("http://127.0.0.1:9/")  # discard port: nothing listens
    servers, errors = await scrape_vllm_servers(urls, timeout_s=0.3)
    assert [s.url for s in servers] == [f"{metrics_server}/v0"]
    reasons = {e.source.removeprefix(f"vllm:{metrics_server}/"): e.reason for e in errors}
    assert reasons["broken"].endswith("answered HTTP 500 instead of metrics")
    assert "did not return Prometheus text: line 1" in reasons["html"]
    assert reasons["not-vllm"].endswith("has no vllm: metrics (not a vLLM server?)")
    assert reasons["slow"].endswith("did not answer within the scrape timeout")
    assert reasons["huge"].endswith("did not return Prometheus text: the page is larger than 8 MiB")
    assert reasons["vllm:http://127.0.0.1:9/"].startswith("nothing answered at http://127.0.0.1:9/metrics")


async def test_no_urls_means_no_scrape() -> None:
    assert await scrape_vllm_servers([], timeout_s=1.0) == ([], [])


async def test_dcgm_exporter_gives_framebuffer_memory_per_gpu(metrics_server: str) -> None:
    reading = await scrape_dcgm(f"{metrics_server}/dcgm", timeout_s=2.0)
    assert reading.errors == []
    assert reading.driver_version == "550.54.15"
    first, second = reading.gpus
    assert (first.index, first.name, first.uuid) == (
        0,
        "NVIDIA H100 80GB HBM3",
        "GPU-5ad0c4f6-2c1e-9d3b-7f41-0e8a6b2c9d17",
    )
    assert (first.used_gib, first.free_gib, first.reserved_gib, first.total_gib) == (
        76.416,
        2.693,
        0.538,
        79.647,
    )
    assert (first.utilization_pct, first.memory_api, first.processes) == (91, "dcgm", [])
    assert (second.index, second.used_gib, second.utilization_pct) == (1, 0.014, 0)


async def test_dcgm_exporter_unreachable_is_an_error_entry() -> None:
    reading = await scrape_dcgm("http://127.0.0.1:9", timeout_s=0.5)
    assert reading.gpus == []
    [error] = reading.errors
    assert error.source == "dcgm:http://127.0.0.1:9"
    assert "dcgm-exporter" in error.reason and error.reason.endswith("no GPU could be read")


def test_dcgm_mig_rows_become_instances_of_their_gpu() -> None:
    labels = (
        'gpu="0",UUID="GPU-9b7c2e1a",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="{p}",GPU_I_ID="{i}"'
    )
    text = "\n".join(
        f"DCGM_FI_DEV_FB_{part}{{{labels.format(p=profile, i=slot)}}} {value}"
        for slot, profile, used, free in (("1", "3g.40gb", 30720, 9472), ("2", "2g.20gb", 13, 19955))
        for part, value in (("USED", used), ("FREE", free))
    )
    reading = dcgm_gpus(parse_prometheus(text))
    [gpu] = reading.gpus
    assert gpu.mig_mode is True
    assert [(m.index, m.name, m.total_gib) for m in gpu.mig_instances] == [
        (1, "NVIDIA A100-SXM4-80GB MIG 3g.40gb", 39.25),
        (2, "NVIDIA A100-SXM4-80GB MIG 2g.20gb", 19.5),
    ]
    assert (gpu.name, gpu.used_gib, gpu.free_gib) == ("NVIDIA A100-SXM4-80GB", 30.013, 28.737)


def test_dcgm_page_without_framebuffer_metrics_says_which_are_missing() -> None:
    reading = dcgm_gpus(parse_prometheus('DCGM_FI_DEV_GPU_UTIL{gpu="0",modelName="NVIDIA L4"} 5\n'))
    assert reading.gpus == []
    [error] = reading.errors
    assert error.source == "dcgm:gpu0" and "DCGM_FI_DEV_FB_USED/FREE" in error.reason


async def test_a_port_the_os_refuses_is_an_error_entry_not_a_crash() -> None:
    servers, [error] = await scrape_vllm_servers(["http://127.0.0.1:99999"], timeout_s=0.5)
    assert servers == []
    assert (
        error.reason
        == "http://127.0.0.1:99999/metrics could not be scraped: connect(): port must be 0-65535."
    )


def test_a_counter_typed_without_total_still_counts_preemptions() -> None:
    """prometheus_client names a counter's samples `<name>_total` even when the page omits the suffix."""
    text = (
        "# TYPE vllm:num_preemptions counter\n"
        'vllm:num_preemptions{engine="0"} 7\n'
        "vllm:num_requests_running 1\n"
    )
    server = vllm_server("http://h:8000", parse_prometheus(text))
    assert server is not None
    assert server.preemptions_total == 7
