"""The prose channel: a person's sentences give hints (that it failed, when), never a verdict alone.

Sentences are written from rules/prose.yaml's vocabulary (failure words, negations, stage cues), in
English and Chinese; the healthy logs are tests/healthy's full boots, with the sentences put around
them. None of these come from collected cases.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from service.diagnosis.normalize import Document, Line, is_prose
from service.diagnosis.prose import read_prose
from service.packs import RulePacks
from service.schemas import Diagnosis

Classify = Callable[..., Diagnosis]

HEALTHY = Path(__file__).resolve().parents[1] / "healthy"
BARE_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB."

# Sentences that mention a failure only to say it is gone, avoided, in the past or hypothetical.
TAKEN_BACK = [
    "Thanks, the OOM went away after --enforce-eager",
    "to avoid CUDA OOM we lowered --max-num-seqs",
    "no OOM anymore after the upgrade",
    "It used to crash while loading the weights, now it is fine.",
    "We fixed the out of memory error by lowering the context length",
    "It no longer crashes when I send long prompts",
    "If it OOMs during CUDA graph capture, I will try eager mode",
    "之前加载模型的时候报错，现在不再报错了",
    "为了避免显存不足，我们调低了 gpu_memory_utilization",
    # questions and advice ask about a failure or warn of one; they state none
    "will it OOM?",
    "will it OOM with this config?",
    "When does vLLM run out of memory",
    "Does the server crash when the KV cache is full?",
    "to lower the risk of OOM we set --max-num-seqs 64",
    "If you get an error about insufficient memory, raise --gpu-memory-utilization.",
    "这样设置会OOM吗？",
    "长上下文是否会爆显存？",
    # asking why it would fail is still hypothetical
    "Why would it OOM with only two requests?",
    # a plain "not" in each of two statements joined by ", and" takes both back
    "It does not crash anymore, and it does not OOM either",
    # a fix stated anywhere in the clause takes back the statement joined to it
    "We fixed the OOM, and the server now keeps running",
    # a change's title naming what it fixes or works around
    "[Bugfix] Fix a crash after preemption when chunked prefill is on",
    "WA for OOM when loading the shards on two cards",
    "Add a workaround for the OOM in the sampler warm-up",
]

# Sentences that alone say memory ran out, with no allocator line anywhere: the stage they name
# places it, never with a log line's certainty.
SAID_ONLY = [
    ("oom occurs after a few hours of serving", "runtime_oom"),
    ("It ran out of VRAM while loading the weights", "weights_oom"),
    ("It OOM'd during CUDA graph capture", "warmup_oom"),
    ("The engine OOMs when the actor is rolling out", "runtime_oom"),
    ("推理时显存溢出", "runtime_oom"),
    ("并发测试时显存逐渐增加并溢出", "runtime_oom"),
    ("加载模型的时候爆显存了", "weights_oom"),
    # a why-question takes the failure as given: it asks the cause
    ("[Bug]: Why does my server hit out of memory errors when serving many requests?", "runtime_oom"),
    ("why do I get OOM while loading the weights?", "weights_oom"),
    ("为什么推理时显存溢出？", "runtime_oom"),
]

# Host RAM said in words: host_oom, also when the same sentence says "OOM".
HOST_SAID = [
    "The container was killed by the OOM killer while loading the weights",
    "System memory OOM after upgrading vLLM",
    "the node has 96GB of RAM and got OOM",
    "加载模型时容器内存不足",
    "推理时内存溢出",
    # a process killed for the memory it used: only the host kills (the GPU's allocator raises)
    "The worker got killed due to excessive memory usage while loading the shards",
    "vllm serve is terminated because of high memory usage after a minute",
    "RAM filled up and the engine died",
    "The pod is evicted for memory pressure every time it starts",
    "加载权重的时候系统内存被占满了",
    # memory over a container's limit, a pod or container dying of an unstated OOM: the host ends it
    "The worker container is killed as soon as its memory exceeds the pod limit",
    "Our deployment is evicted every time its memory reaches the container limit",
    "Halfway through the shards the pod died, and the events do not show any error, so it looks like OOM",
]

# Sentences that place a bare OOM, and the phase they place it in.
PLACED = [
    ("It crashes while loading the weights.", "weights_oom"),
    ("vllm dies after a few concurrent requests", "runtime_oom"),
    ("it works for short prompts but crashes on a 30k prompt", "runtime_oom"),
    ("加载模型权重的时候就报错了", "weights_oom"),
    ("服务启动后，并发请求一多就爆显存", "runtime_oom"),
    ("It OOMs during CUDA graph capture every time", "warmup_oom"),
    ("The server fails when I send a long document for inference", "runtime_oom"),
    ("the OOM went away after --enforce-eager, but now it crashes while loading the model", "weights_oom"),
    # a while into serving, said without naming a request
    ("After some time the server crashes.", "runtime_oom"),
    ("It dies after a few hundred requests", "runtime_oom"),
    ("Under heavy load it fails within minutes", "runtime_oom"),
    ("服务跑了一段时间之后就报错", "runtime_oom"),
    # a plain "not" governs its own statement, not one joined to it by ", and"
    ("The server dies after a few hundred requests, and I don't see any error in its log", "runtime_oom"),
    # loading with what loads named by its name only
    ("Why does it always crash when loading phi4-14b?", "weights_oom"),
]

# The GPU's memory said to fill up, in Chinese: placed by the stage the sentence names.
FILLED = [("推理一段时间后显存被占满", "runtime_oom"), ("加载模型时显存爆了", "weights_oom")]

# Limits of a GPU generation said in words: a quantization scheme or bfloat16 the hardware cannot run.
CAPABILITY_SAID = [
    ("AWQ is not supported on Volta", "quantization_config"),
    ("[Bug]: FP8 W8A8 is not supported on my V100 cards", "quantization_config"),
    ("GPTQ-Marlin isn't supported on Pascal GPUs", "quantization_config"),
    ("V100 不支持 FP8 量化", "quantization_config"),
    ("bfloat16 is not supported on a T4", "dtype_unsupported"),
    ("T4 不支持 bf16，换成 float16 也不行", "dtype_unsupported"),
]


def _healthy_logs() -> list[str]:
    return sorted(p.stem for p in HEALTHY.glob("*.log"))


@pytest.mark.parametrize("name", _healthy_logs())
def test_a_healthy_log_with_sentences_taking_a_failure_back_stays_no_failure(
    run_classify: Classify, name: str
) -> None:
    log = (HEALTHY / f"{name}.log").read_bytes().decode("utf-8", errors="replace")
    around = "\n".join(TAKEN_BACK[:4]) + "\n" + log + "\n" + "\n".join(TAKEN_BACK[4:])
    diagnosis = run_classify(around)
    assert diagnosis.phase == "no_failure", diagnosis.summary
    assert not [f for f in diagnosis.findings if f.severity == "error"]


@pytest.mark.parametrize("sentence", TAKEN_BACK)
def test_a_sentence_taking_a_failure_back_is_no_failure_on_its_own(
    run_classify: Classify, sentence: str
) -> None:
    assert run_classify(f"INFO:     Application startup complete.\n{sentence}").phase == "no_failure"


@pytest.mark.parametrize(("sentence", "phase"), PLACED)
def test_a_bare_oom_is_placed_by_the_persons_words(run_classify: Classify, sentence: str, phase: str) -> None:
    for log in (f"{sentence}\n{BARE_OOM}", f"{BARE_OOM}\n\n{sentence}"):
        diagnosis = run_classify(log)
        assert diagnosis.phase == phase, diagnosis.summary
        assert diagnosis.confidence < 0.9  # words are a hint, not a frame


def test_frames_outweigh_the_persons_words(run_classify: Classify) -> None:
    log = (
        "It crashes while loading the weights.\n"
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.12/site-packages/vllm/v1/worker/runner.py", line 1, in capture_model\n'
        f"{BARE_OOM}\n"
    )
    assert run_classify(log).phase == "warmup_oom"


def test_a_sentence_alone_is_never_a_confident_verdict(run_classify: Classify) -> None:
    diagnosis = run_classify("vLLM crashes with CUDA out of memory while loading the weights")
    assert diagnosis.phase == "weights_oom"
    assert diagnosis.confidence <= 0.5
    assert "person's words" in diagnosis.summary


@pytest.mark.parametrize(
    ("text", "prose"),
    [
        ("It crashes while loading the weights on two H20 (141GB) cards.", True),
        ("加载模型权重的时候就报错了", True),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.", False),
        ('  File "/venv/lib/python3.12/site-packages/vllm/worker.py", line 1, in load_model', False),
        ("Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:03<00:03,  1.52s/it]", False),
        ("model='Qwen/Qwen2.5-7B', dtype=torch.bfloat16", False),
        # a setting or two written inline is a sentence's; settings making up the line, or
        # environment assignments opening it, are a program's or a shell's
        ("I tried setting tensor_parallel_size=2 but it says I need to have Ray installed.", True),
        ("I've set max_tokens=16384 and max_model_len=16384 both in the environment and the script.", True),
        ("我把 max_model_len=4096 设置好了以后还是报错", True),
        ("Namespace(model='x', max_model_len=4096, dtype='auto', tensor_parallel_size=2)", False),
        ("VLLM_USE_V1=0 VLLM_LOGGING_LEVEL=DEBUG vllm serve my/model --max-model-len 4096", False),
        ("`--enable-sleep-mode` leaks HBM on the server when `VLLM_SERVER_DEV_MODE=1` is set", True),
        # a message naming a setting for its reader is the program's
        ("For debugging consider passing CUDA_LAUNCH_BLOCKING=1.", False),
        ("Pass `add_to_git_credential=True` if you want to set the git credential as well.", False),
        ("Didn't receive health check response for Replica(id='r1', deployment='vLLM') after 10.0s", False),
        ("Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", False),
        # a record's field after its message's last sentence is the record's
        ("Requests are preempted for lack of KV cache space. total_num_cumulative_preemption=12", False),
        # a sentence's own small words around an inline setting make it a sentence without "I"/"we"
        ("Serving Qwen2.5-72B with tp=4 still runs out of memory on the first prompt", True),
        ("With max_num_seqs=512 the engine dies during cuda graph capture", True),
        ("Upgrading to 0.8.5 and keeping enforce_eager=True does not help", True),
        ("设置 gpu_memory_utilization=0.95 之后第一个请求就爆显存了", True),
        ("tp=2 时加载权重就 OOM", True),
        ("model=qwen tp=2 pp=1 dtype=bfloat16 max_len=8192", False),
        # a link is one word of the sentence: its path is no file a program printed, its query no settings
        ("Same as [this report](https://example.org/t/oom/1?utm_source=chat.com&ref=x) here", True),
        ("It dies on load, see https://github.com/o/r/blob/main/w/loader.py#L88 for the check", True),
        ("The model crashes while loading, as described in https://example.com/a?b=1&c=2 too", True),
        ("参考 https://example.cn/issue/42?from=share&lang=zh 的说明，加载时显存不足", True),
        ("https://github.com/org/repo/issues/42", False),
    ],
)
def test_prose_is_told_from_log_lines(text: str, prose: bool) -> None:
    assert is_prose(Line(number=1, source="", level="", text=text)) is prose


def test_a_line_with_a_logger_prefix_is_never_prose() -> None:
    assert not is_prose(Line(number=1, source="", level="INFO", text="It crashes while loading the weights."))


@pytest.mark.parametrize(("sentence", "phase"), SAID_ONLY)
def test_memory_running_out_said_only_in_words_is_placed_by_their_stage(
    run_classify: Classify, sentence: str, phase: str
) -> None:
    diagnosis = run_classify(f"{sentence}\nINFO 05-02 10:11:12 llm_engine.py:72] Initializing an LLM engine")
    assert diagnosis.phase == phase, diagnosis.summary
    assert diagnosis.confidence <= 0.5


@pytest.mark.parametrize("sentence", HOST_SAID)
def test_host_ram_said_in_words_is_host_oom(run_classify: Classify, sentence: str) -> None:
    diagnosis = run_classify(sentence)
    assert diagnosis.phase == "host_oom", diagnosis.summary
    assert diagnosis.confidence <= 0.5


def test_an_ambiguous_memory_word_follows_the_rest_of_the_persons_words(run_classify: Classify) -> None:
    # 内存 is host RAM on its own, the GPU's memory in a post that is about 显存
    assert run_classify("推理时内存溢出").phase == "host_oom"
    assert run_classify("推理时内存溢出\n显存占用一直在涨").phase == "runtime_oom"


def test_a_question_after_a_stated_failure_does_not_take_it_back(run_classify: Classify) -> None:
    diagnosis = run_classify("随着请求的增加显存慢慢增大，最终会报OOM错误，这个怎么解决呢？")
    assert diagnosis.phase == "runtime_oom", diagnosis.summary


def test_a_log_line_outweighs_words_about_host_ram(run_classify: Classify) -> None:
    log = f"the machine has 64GB of RAM and it still fails\n{BARE_OOM}"
    assert run_classify(log).phase != "host_oom"


@pytest.mark.parametrize(
    ("sentence", "phase"),
    [
        ("The server crashes once a chat exceeds its context window", "request_too_long"),
        ("Requests that exceed the context window return a 400", "request_too_long"),
        ("当用户请求tokens数超过模型上下文时，服务报错", "request_too_long"),
        ("Some sequences get preempted under load and the output is cut", "kv_preemption"),
        ("Long prompts keep being preempted and throughput collapses", "kv_preemption"),
        ("the scheduler preempts and resumes the same request every step", "kv_preemption"),
        ("请求总是被抢占，吞吐很低", "kv_preemption"),
        # the cache at 100% while serving: the scheduler has no free block left
        (
            "The GPU KV cache usage keeps increasing and reaches 100%, then nothing is generated",
            "kv_preemption",
        ),
        ("GPU KV cache usage: 100.0%以后就卡住，无法继续提供服务", "kv_preemption"),
        # said the other way round, the share before the cache
        ("Reaching nearly 100% KV cache makes the waiting queue explode", "kv_preemption"),
        # the context used up, a limit of no tokens, a prompt as long as the limit
        (
            "I am getting an error saying that the context length for my model is exhausted",
            "request_too_long",
        ),
        ("vllm claims max_model_len is 0 although I set 16384", "request_too_long"),
        ("[Bug]: VLLM_USE_V1=0 is needed if prompt length equals max model length", "request_too_long"),
        ("The memory check at startup always fails on the second card", "startup_budget"),
        # an error named by the setting the start-up check compares against
        ("After the first job the next engine fails with gpu_memory_utilization errors", "startup_budget"),
        (
            "vllm refuses to start, it says not enough free memory on startup while nvidia-smi is empty",
            "startup_budget",
        ),
        ("每次启动显存检查都失败", "startup_budget"),
        *CAPABILITY_SAID,  # a GPU generation's limit said in words
    ],
)
def test_a_failure_named_in_words_by_what_happened_gives_its_phase(
    run_classify: Classify, sentence: str, phase: str
) -> None:
    diagnosis = run_classify(sentence)
    assert diagnosis.phase == phase, diagnosis.summary
    assert diagnosis.confidence <= 0.5


@pytest.mark.parametrize(
    "sentence",
    [
        "The stats look fine and no request was ever preempted during the benchmark",
        "Without specifying anything about preemption it runs.",
        "What happens when a prompt is longer than the max model length?",
        "Since the fix the memory check at startup no longer fails.",
        "Does the free-memory check on startup fail when another process holds memory?",
        "Requests used to be preempted and resumed before we raised the KV cache size.",
        "If you see not enough memory at startup, lower gpu_memory_utilization.",
        # a modal verb or "otherwise" supposes what it names
        "My understanding is that batched tokens could be more than the max model length.",
        "Set it above max_model_len. Otherwise, vLLM fails at server startup due to argument validation.",
        "The server does not hang anymore since the upgrade",
        "GPU KV cache usage stays around 40% under load and every request finishes",
        "I set max_model_len=16384 and gpu_memory_utilization=0.9 and it serves fine.",
    ],
)
def test_naming_a_failure_only_to_deny_or_ask_about_it_is_no_failure(
    run_classify: Classify, sentence: str
) -> None:
    assert run_classify(f"INFO:     Application startup complete.\n{sentence}").phase == "no_failure"


@pytest.mark.parametrize(
    "sentence",
    [
        "Is AWQ not supported on Turing?",
        "Before we switched to GPTQ it said AWQ is not supported on Volta, now it runs",
        "The profile leaves 2 GiB of headroom for activations",
        "This profile eliminates the OOM we saw with a 128K window",
        "Do not exceed 0.96: 0.97 used to lock up the node",
    ],
)
def test_limits_asked_about_or_in_the_past_and_headroom_are_no_failure(
    run_classify: Classify, sentence: str
) -> None:
    assert run_classify(f"INFO:     Application startup complete.\n{sentence}").phase == "no_failure"


@pytest.mark.parametrize(
    ("log", "phase"),
    [
        # PyTorch's own message says "If … to avoid fragmentation": the quote is not the person's "if"
        (
            'It dies while loading the weights, I get "torch.OutOfMemoryError: CUDA out of memory. Tried to'
            " allocate 2.00 GiB. If reserved but unallocated memory is large try setting"
            ' PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."',
            "weights_oom",
        ),
        (
            "Right after loading I got `ValueError: No available memory for the cache blocks. Try increasing"
            " `gpu_memory_utilization` when initializing the engine.` what should I do?",
            "kv_cache_capacity",
        ),
        (
            "The server printed “RuntimeError: Aborted due to the lack of CPU swap space. Please increase the"
            " swap space to avoid this error.” and stopped",
            "kv_preemption",
        ),
    ],
)
def test_a_message_quoted_in_a_sentence_is_read_as_logged(
    run_classify: Classify, log: str, phase: str
) -> None:
    assert run_classify(log).phase == phase


def test_a_quoted_message_the_person_says_is_gone_stays_taken_back(run_classify: Classify) -> None:
    log = (
        "INFO:     Application startup complete.\n"
        'The "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB." error no longer'
        " appears after --enforce-eager"
    )
    assert run_classify(log).phase == "no_failure"


@pytest.mark.parametrize(("sentence", "phase"), FILLED)
def test_gpu_memory_said_to_fill_up_is_placed_by_its_stage(
    run_classify: Classify, sentence: str, phase: str
) -> None:
    assert run_classify(sentence).phase == phase


# Sentences around a healthy paste that share words with vLLM's messages without retelling one: an
# issue form's boilerplate, a question about how a setting works, a fix describing the bug it removed.
BORROWED_WORDS = [
    "- [x] Make sure you already searched for relevant issues, and asked the chatbot living at the bottom "
    "right corner of the [documentation page](https://docs.vllm.ai/en/latest/).",
    "As I understand it, max-num-batched-tokens is the maximum number of tokens that can be stored per "
    "batch, so a 128K sequence shouldn't fit. Is it split into chunks?",
    "The worker previously computed available KV cache memory without graph capture memory, leading to "
    "unexpected OOM.",
]


@pytest.mark.parametrize("sentence", BORROWED_WORDS)
def test_a_sentence_borrowing_a_few_words_of_a_vllm_message_is_no_failure(
    run_classify: Classify, sentence: str
) -> None:
    log = (HEALTHY / f"{_healthy_logs()[0]}.log").read_bytes().decode("utf-8", errors="replace")
    diagnosis = run_classify(f"{sentence}\n\n{log}")
    assert diagnosis.phase == "no_failure", diagnosis.summary


def test_prose_around_a_healthy_log_does_not_make_no_failure_more_certain(run_classify: Classify) -> None:
    log = (HEALTHY / f"{_healthy_logs()[0]}.log").read_bytes().decode("utf-8", errors="replace")
    bare = run_classify(log)
    worded = run_classify("\n".join([*TAKEN_BACK, *BORROWED_WORDS, log]))
    assert bare.phase == worded.phase == "no_failure"
    assert worded.confidence <= bare.confidence


# A failure the person names without an error line and without saying memory ran out: not_memory,
# as sure as words can make it.
FAILED_SAID = [
    "[Bug]: failed to set up vllm in docker with the 7900XTX due to a kernel that is not built",
    "The server crashes after the first request and never comes back",
    "I tried two GPUs but it says I need to have Ray installed.",
    "启动服务失败了，日志如下",
    "推理的时候报错了，没有任何输出",
    # what the person saw instead of an error: a server that hangs or does not start, an answer
    # that does not stop
    "The API server hangs after the second request and never answers",
    "[Bug]: with chunked prefill on the server does not start up and fails",
    "the response is very long, it will not stop until the max length",
    "服务启动以后就卡住了，一直没有响应",
    # the noun opening a report, before what it happened with
    "[Bug]: Deadlock when two replicas share one node",
    # a container something else ends: the kubelet's probes restart it
    "The liveness probe restarts the container before the weights are downloaded",
]


@pytest.mark.parametrize("sentence", FAILED_SAID)
def test_a_failure_said_without_memory_is_not_memory_with_a_words_confidence(
    run_classify: Classify, sentence: str
) -> None:
    diagnosis = run_classify(
        f"{sentence}\n\nINFO 01-01 00:00:00 llm_engine.py:72] Initializing an LLM engine"
    )
    assert diagnosis.phase == "not_memory", diagnosis.summary
    assert diagnosis.confidence <= 0.45  # below an error a sentence names
    assert "person's words" in diagnosis.summary


@pytest.mark.parametrize(
    ("sentence", "phase"),
    [
        ("Currently, vLLM hangs when a single sequence is longer than the KV cache.", "kv_cache_capacity"),
        ("Deployment fails when the free GPU memory is below 90%", "startup_budget"),
        ("启动失败，KV cache 不够", "kv_cache_capacity"),
    ],
)
def test_a_check_of_vllms_told_in_words_gives_its_phase(
    run_classify: Classify, sentence: str, phase: str
) -> None:
    assert run_classify(sentence).phase == phase


# What the person says they were doing, in a sentence other than the one saying it failed, places a
# bare OOM nothing around it places.
@pytest.mark.parametrize(
    ("doing", "phase"),
    [
        ("I run the MMLU evaluation with lm_eval and batch size 64.", "runtime_oom"),
        ("We send it a picture together with the question.", "runtime_oom"),
        ("The first step loads the model weights from the NFS share.", "weights_oom"),
        ("我们在压测并发请求。", "runtime_oom"),
    ],
)
def test_what_the_person_was_doing_places_a_bare_oom(run_classify: Classify, doing: str, phase: str) -> None:
    diagnosis = run_classify(f"{doing}\n\nThen this came out:\n\n{BARE_OOM}")
    assert diagnosis.phase == phase, diagnosis.summary
    assert diagnosis.confidence < 0.5


def test_what_the_person_was_doing_does_not_outweigh_a_stage_line(run_classify: Classify) -> None:
    log = (
        "We send it a picture together with the question.\n"
        "INFO 01-01 00:00:00 [gpu_model_runner.py:1] Capturing CUDA graphs (mixed prefill-decode)\n"
        f"{BARE_OOM}\n"
    )
    assert run_classify(log).phase == "warmup_oom"


def test_start_up_words_name_no_step_of_it(run_classify: Classify) -> None:
    said = run_classify(f"While launching the server I get this:\n\n{BARE_OOM}")
    bare = run_classify(BARE_OOM)
    assert said.phase == bare.phase


# An error the person quotes inside a sentence or a title goes through the same line rules as a log
# line, anchored ones included.
@pytest.mark.parametrize(
    ("sentence", "phase"),
    [
        (
            "Deploying on six cards fails, breaking tensor parallelism: "
            "`AssertionError: 151552 is not divisible by 6`",
            "parallelism_config",
        ),
        ("The benchmark stops with `AssertionError: Preemptions detected: 24`", "kv_preemption"),
        (
            'The run stops with "ValueError: Total number of attention heads (64) must be divisible by '
            'tensor parallel size (3)."',
            "parallelism_config",
        ),
    ],
)
def test_an_error_quoted_in_a_sentence_is_read_by_the_line_rules(
    run_classify: Classify, sentence: str, phase: str
) -> None:
    assert run_classify(sentence).phase == phase


NO_BLOCKS = (
    "ERROR 03-07 00:47:48 core.py:291] ValueError: No available memory for the cache blocks. "
    "Try increasing `gpu_memory_utilization` when initializing the engine."
)


@pytest.mark.parametrize(
    "cause",
    [
        "I start two vLLM instances on one GPU at the same time.",
        "The peak counts memory used by other running processes on the same GPU.",
        "两个模型同时启动在一张卡上。",
    ],
)
def test_a_cause_the_person_names_refines_the_symptom_a_log_line_shows(
    run_classify: Classify, cause: str
) -> None:
    assert run_classify(NO_BLOCKS).phase == "kv_cache_capacity"
    diagnosis = run_classify(f"{cause}\n\n{NO_BLOCKS}")
    assert diagnosis.phase == "profiling_inconsistent", diagnosis.summary
    assert diagnosis.confidence <= 0.6


def test_a_cause_asked_about_refines_nothing(run_classify: Classify) -> None:
    asked = "Can I start two vLLM instances on one GPU at the same time?"
    assert run_classify(f"{asked}\n\n{NO_BLOCKS}").phase == "kv_cache_capacity"
    assert (
        run_classify(f"{asked}\n\n{(HEALTHY / f'{_healthy_logs()[0]}.log').read_text()}").phase
        == "no_failure"
    )


KV_TOO_LONG = (
    "ValueError: The model's max seq len (19008) is larger than the maximum number of tokens that can be "
    "stored in KV cache (3840). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
    "when initializing the engine."
)


@pytest.mark.parametrize(
    "introducer",
    [
        "With a long context you may see the following error:",
        "在vllm部署推理时，基于kv cache的长度限制，很可能会出现如下情况：",
        "If max_model_len is set above what fits, it could fail with:",
    ],
)
def test_an_error_a_sentence_introduces_as_only_supposed_did_not_happen(
    run_classify: Classify, introducer: str
) -> None:
    diagnosis = run_classify(
        f"[Feature] limit max_model_len\n\n{introducer}\n`{KV_TOO_LONG}`\n\nIs there a way?"
    )
    assert diagnosis.phase == "no_failure", diagnosis.summary


@pytest.mark.parametrize(
    "introducer",
    [
        "When I start the server it fails with:",
        "如果把max_model_len设大，启动就会报错：",
        "I get the following error message:",
        # a reproduction and a hedge about the cause introduce what happened
        "If you run vllm serve with --max-model-len 19008 you get:",
        "可能是下面这个问题：",
        "I might have hit the same bug:",
    ],
)
def test_an_error_a_sentence_introduces_as_met_still_decides(run_classify: Classify, introducer: str) -> None:
    diagnosis = run_classify(f"{introducer}\n{KV_TOO_LONG}")
    assert diagnosis.phase == "kv_cache_capacity", diagnosis.summary


def test_source_code_in_a_diff_is_no_run(run_classify: Classify) -> None:
    log = (
        "Update the bf16 check's advice for V100 users\n\n"
        "@@ -231,4 +231,6 @@ def _check_if_gpu_supports_dtype(torch_dtype: torch.dtype):\n"
        "             raise ValueError(\n"
        '                 "Bfloat16 is only supported on GPUs with compute capability "\n'
        '                 f"of at least 8.0. Your {gpu_name} GPU has compute capability "\n'
        '+                f" You can use float16 instead, for example: --dtype=half."\n'
    )
    assert run_classify(log).phase == "no_failure"


@pytest.mark.parametrize(
    "sentence",
    [
        "Update a more user-friendly error message when using a V100",
        "[Misc]: Improve OOM error messages with actionable suggestions",
        "When len(prompt) + max_tokens > max_model_len, the error message incorrectly reported the limit.",
    ],
)
def test_a_failure_word_naming_a_message_states_no_failure(run_classify: Classify, sentence: str) -> None:
    assert run_classify(sentence).phase == "no_failure"


def test_an_error_message_the_person_met_is_a_failure(run_classify: Classify) -> None:
    assert run_classify("I got an error message while loading the model and it exits").phase == "not_memory"


def test_a_sentence_meeting_a_quoted_message_is_not_taken_back_by_a_later_clause(
    run_classify: Callable[..., Diagnosis],
) -> None:
    log = (
        "Training with the rollout we hit vLLM saying `Input prompt (9000 tokens) is too long and exceeds "
        "limit of 8192`. Raising the limit in the config file should avoid this problem."
    )
    assert run_classify(log).phase == "request_too_long"


def test_a_sentence_saying_a_step_aborts_states_a_failure(packs: RulePacks) -> None:
    doc = Document("The memory check in the worker aborts the start when another process frees memory")
    assert [cue.line for cue in read_prose(doc, packs.prose)] == [1]


@pytest.mark.parametrize(
    "sentence",
    [
        "When warmup is disabled, the server crashes during the first prefill request.",
        "When I turn CUDA graphs off, the first long prompt runs out of memory.",
        "一旦关闭预热，第一个请求进来就 OOM。",
    ],
)
def test_a_stage_a_condition_switches_off_is_where_the_reported_run_failed(
    packs: RulePacks, sentence: str
) -> None:
    (cue,) = read_prose(Document(sentence), packs.prose)
    assert cue.stage in ("warmup", "profiling") and not cue.variant


def test_a_failure_told_after_a_change_that_let_the_run_further_names_no_stage_of_the_reported_run(
    packs: RulePacks,
) -> None:
    (cue,) = read_prose(
        Document("With --enforce-eager it loads but then OOMs on the first request."), packs.prose
    )
    assert cue.stage is None and cue.variant


def test_a_condition_that_changes_nothing_tells_the_reported_run(packs: RulePacks) -> None:
    (cue,) = read_prose(Document("When I send 10 concurrent requests, it OOMs."), packs.prose)
    assert cue.stage == "serving" and not cue.variant


@pytest.mark.parametrize(
    "sentence",
    [
        "The benchmark's warmup requests already run out of memory.",
        "OOM during the warmup stage of benchmark_serving.",
        "压测的预热阶段就爆显存。",
        "While profiling with nsys, it runs out of GPU memory.",
    ],
)
def test_a_harness_warmup_or_profiler_names_serving(packs: RulePacks, sentence: str) -> None:
    (cue,) = read_prose(Document(sentence), packs.prose)
    assert cue.stage == "serving"


@pytest.mark.parametrize(
    ("sentence", "memory"),
    [
        ("While loading, the process got killed.", "host"),
        ("加载模型的时候进程被杀了。", "host"),
        ("The whole machine freezes and reboots during loading.", "host"),
        ("推理的时候显存爆了。", "device"),
    ],
)
def test_a_failure_told_by_its_symptom_says_whose_memory_ran_out(
    packs: RulePacks, sentence: str, memory: str
) -> None:
    (cue,) = read_prose(Document(sentence), packs.prose)
    assert cue.memory == memory
