"""Host memory is not GPU memory (DESIGN §3.1 host_oom): a process killed with SIGKILL, Ray's memory
monitor and the host's RAM running out in a person's words (English and Chinese: 内存 is RAM, 显存 the
GPU's) are host_oom; a sentence that takes it back or is about something else names none. Lines are
written from the programs' own message formats (CPython's subprocess, Ray's OOM prevention), not
copied from a collected case."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.schemas import Diagnosis

Classify = Callable[..., Diagnosis]

KILLED = [
    # CPython's subprocess.CalledProcessError.__str__ for a negative return code
    "subprocess.CalledProcessError: Command '['vllm', 'serve', 'Qwen/Qwen2.5-7B-Instruct']' died with "
    "<Signals.SIGKILL: 9>.",
    # a notebook platform reporting the kernel's kill of the Python process
    "The Python process exited with exit code 137 (SIGKILL). This may have been caused by an OOM error.",
]


@pytest.mark.parametrize("line", KILLED)
def test_a_process_killed_with_sigkill_is_a_host_oom(run_classify: Classify, line: str) -> None:
    assert run_classify(line).phase == "host_oom"


SAID_HOST = [
    "When I load the 65B model with tensor_parallel_size=4, Ray raised an OOM exception.",
    "Ray OOM prevention kills vLLM actors during engine initialization (collective_rpc/offload_states)",
    "Ray's memory monitor then kills the most recently scheduled actor at 95% node RAM.",
    "推理到一半内存会用完，进程被自动kill。",
]


@pytest.mark.parametrize("words", SAID_HOST)
def test_the_hosts_memory_running_out_in_words_is_a_host_oom(run_classify: Classify, words: str) -> None:
    diagnosis = run_classify(words)
    assert diagnosis.phase == "host_oom"
    assert diagnosis.confidence <= 0.5  # the person's words alone


def test_the_gpus_memory_in_chinese_is_not_the_hosts(run_classify: Classify) -> None:
    assert run_classify("加载模型权重的时候显存不足，直接报错了。").phase not in ("host_oom", "no_failure")


NOT_A_HOST_OOM = [
    "Ray did not OOM after I lowered the number of parallel workers.",
    "The host RAM never ran out, top shows 40 GB used at most.",
    "推理过程中内存没有用完，进程也没有被kill。",
    "The node has 500 GB of RAM and the Ray dashboard shows 40% of it used.",
]


@pytest.mark.parametrize("words", NOT_A_HOST_OOM)
def test_a_sentence_taking_it_back_or_about_something_else_names_no_host_oom(
    run_classify: Classify, words: str
) -> None:
    assert run_classify(words).phase == "no_failure"


def test_a_ray_worker_dead_of_a_system_error_whose_first_cause_is_the_oom_killer_is_a_host_oom(
    run_classify: Classify,
) -> None:
    # Ray's raylet (node_manager.cc) on a worker that exited without a word, after vLLM's start-up lines
    log = (
        "INFO 03-01 10:00:00 worker.py:120] Loading model weights took 0.93 GB\n"
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. "
        "Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection "
        "error code 2. End of file. There are some potential root causes. (1) The process is killed by "
        "SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. (3) The worker "
        "is crashed unexpectedly due to SIGSEGV or other unexpected errors.\n"
    )
    assert run_classify(log).phase == "host_oom"


@pytest.mark.parametrize("opening", ["can't start the server", "couldn't load it", "doesn't run at all"])
def test_a_clause_opening_with_a_contraction_states_the_failure_it_quotes(
    run_classify: Classify, opening: str
) -> None:
    assert run_classify(f"On two nodes it {opening}, get error: Cannot allocate memory\n").phase == "host_oom"
    assert run_classify(f"[Bug]: {opening}, get error: Cannot allocate memory\n").phase == "host_oom"
