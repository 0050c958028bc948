"""Prefixes other programs put before a log line are stripped like vLLM's own, keeping their level:
torch's c10 log and glog/absl (one-letter levels), NCCL's `host:pid:tid [dev]`, torch c10d's rank
tag, kubectl's `--prefix`, journald/syslog, Docker swarm's task names, Ray Serve replicas, pytest's
`E` lines. Written from each program's documented format, not from collected pastes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.diagnosis.normalize import Document, split_prefixes
from service.schemas import Diagnosis

Classify = Callable[..., Diagnosis]


@pytest.mark.parametrize(
    ("raw", "source", "level", "text"),
    [
        # torch's c10 logging (glog format, nanoseconds, no thread id), with the rank torchrun adds
        (
            "[rank0]:[W314 12:34:56.789012345 ProcessGroupNCCL.cpp:1234] Warning: WARNING: x",
            "rank0",
            "WARNING",
            "Warning: WARNING: x",
        ),
        ("[E1102 09:01:02.123456789 socket.cpp:1010] failed", "", "ERROR", "failed"),
        # older torch: the level letter and the file only
        (
            "[W socket.cpp:663] [c10d] The client socket has failed to connect",
            "",
            "WARNING",
            "[c10d] The client socket has failed to connect",
        ),
        # absl / glog: level, MMDD, time, thread id, file:line]
        (
            "E0314 12:34:56.789012 123456 bfc_allocator.cc:45] RESOURCE_EXHAUSTED: out",
            "",
            "ERROR",
            "RESOURCE_EXHAUSTED: out",
        ),
        ("I0314 12:34:56.789012  4242 server.cc:123] started", "", "INFO", "started"),
        ("F0314 12:34:56.789012  4242 main.cc:9] Check failed", "", "CRITICAL", "Check failed"),
        # torch c10d's own tag after the glog prefix names the rank
        (
            "[E314 12:34:56.789012345 ProcessGroupNCCL.cpp:1234] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
            "Process group watchdog",
            "rank3",
            "ERROR",
            "Process group watchdog",
        ),
        # NCCL: host:pid:tid [device] NCCL LEVEL (the NCCL words stay, rules read them)
        (
            "node-3:23817:24001 [0] NCCL WARN Cuda failure 'out of memory'",
            "",
            "WARNING",
            "NCCL WARN Cuda failure 'out of memory'",
        ),
        (
            "node-3:23817:23817 [1] NCCL INFO cudaDriverVersion 12040",
            "",
            "INFO",
            "NCCL INFO cudaDriverVersion 12040",
        ),
        # kubectl logs --prefix, journald, Docker swarm, Ray Serve
        (
            "[pod/vllm-7d9f6c5b8-x2x7q/vllm] INFO 10-14 12:00:00 [core.py:708] up",
            "vllm-7d9f6c5b8-x2x7q/vllm",
            "INFO",
            "up",
        ),
        (
            "Mar 14 12:34:56 gpu-node-3 python3[23817]: torch.OutOfMemoryError: x",
            "python3[23817]",
            "",
            "torch.OutOfMemoryError: x",
        ),
        (
            "Mar  4 02:04:06 node docker/vllm[7]: ERROR 10-14 12:00:00 [core.py:7] y",
            "docker/vllm[7]",
            "ERROR",
            "y",
        ),
        (
            "vllm.1.abc123def@node-2    | INFO 10-14 12:00:00 [core.py:708] x",
            "vllm.1.abc123def@node-2",
            "INFO",
            "x",
        ),
        (
            "(ServeReplica:default:VLLMDeployment pid=4242) INFO 10-14 12:00:00 x",
            "ServeReplica:default:VLLMDeployment pid=4242",
            "INFO",
            "x",
        ),
        # pytest's failure lines
        (
            "E       torch.OutOfMemoryError: CUDA out of memory.",
            "",
            "",
            "torch.OutOfMemoryError: CUDA out of memory.",
        ),
    ],
)
def test_a_programs_prefix_is_stripped_and_its_level_kept(
    raw: str, source: str, level: str, text: str
) -> None:
    assert split_prefixes(raw) == (source, level, text)


@pytest.mark.parametrize(
    "raw",
    [
        "E.g. this is what I ran",
        "Error: something went wrong",
        "I think [W socket.cpp:1] is harmless",
        "Mar 14 we upgraded vLLM",
        "Each GPU has 80 GiB",
    ],
)
def test_words_that_only_look_like_a_prefix_stay(raw: str) -> None:
    assert split_prefixes(raw) == ("", "", raw)


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (
            "[rank0]:[E314 12:34:56.789012345 ProcessGroupNCCL.cpp:1234] "
            "[PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with "
            "exception: CUDA error: out of memory",
            "Process group watchdog thread terminated",
        ),
        (
            "[rank1]:[E314 14:33:45.172185860 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600009 milliseconds before timing out.",
            "Watchdog caught collective operation timeout",
        ),
        ("node-3:23817:24001 [0] NCCL WARN Cuda failure 'out of memory'", "NCCL WARN Cuda failure"),
        (
            "Mar 14 12:34:56 gpu-node-3 python3[23817]: ValueError: No available memory for the cache "
            "blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
            "ValueError: No available memory",
        ),
    ],
)
def test_evidence_and_titles_show_the_message_without_the_prefix(
    run_classify: Classify, line: str, shown: str
) -> None:
    diagnosis = run_classify(line)
    assert diagnosis.evidence and diagnosis.evidence[0].text.startswith(shown)
    assert "[E314" not in diagnosis.title and "23817" not in diagnosis.title


def test_a_glog_error_line_is_a_log_line_not_a_persons_sentence() -> None:
    doc = Document("E0314 12:34:56.789012 123456 worker.cc:45] we could not reach the other host at all\n")
    assert doc.line(1).level == "ERROR"
