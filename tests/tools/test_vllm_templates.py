"""tools/vllm_templates.py's relevance filter: which of vLLM's templates must have a rule. Synthetic
entries (wordings vLLM does not print), so the filter is tested as a mechanism, not per message."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _tool(name: str) -> ModuleType:
    sys.path.insert(0, str(REPO / "tools"))
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


TEMPLATES = _tool("vllm_templates")


def _entry(
    text: str, file: str = "vllm/worker/worker.py", function: str = "f", level: str = "raise"
) -> object:
    return TEMPLATES.Entry(level, "ValueError", text, (), file, function)


@pytest.mark.parametrize(
    ("text", "file", "function", "subject"),
    [
        pytest.param(
            "Could not find the config file for {}",
            "vllm/model_executor/model_loader/loader.py",
            "load_quant_config",
            "quantization",
            id="function-named-for-quantization",
        ),
        pytest.param(
            "cudaHostRegister failed for {} bytes",
            "vllm/v1/kv_offload/cpu/region.py",
            "pin_region",
            "host_memory",
            id="host-pinning-in-an-offload-folder",
        ),
        pytest.param(
            "Failed to allocate pinned memory for the {} GiB CPU tier",
            "vllm/distributed/kv_transfer/cpu_tier.py",
            "allocate",
            "host_memory",
            id="host-allocation-in-a-connector",
        ),
        pytest.param(
            "world size ({}) does not match tensor parallel size ({}) times pipeline parallel size ({})",
            "vllm/distributed/state.py",
            "init",
            "parallelism",
            id="a-parallel-layout-that-does-not-multiply-out",
        ),
    ],
)
def test_templates_stating_an_unmet_need_of_their_subject_are_relevant(
    text: str, file: str, function: str, subject: str
) -> None:
    subjects, reason = TEMPLATES.classify(_entry(text, file, function))
    assert reason is None
    assert subject in subjects


@pytest.mark.parametrize(
    ("text", "file", "function"),
    [
        pytest.param(
            "Available RAM: {} GiB.",
            "vllm/model_executor/model_loader/weight_utils.py",
            "f",
            id="host-figure",
        ),
        pytest.param(
            "Could not find the config file for {}", "vllm/entrypoints/chat.py", "load", id="no-subject"
        ),
        pytest.param(
            "Pinned memory buffer of {} GiB is ready",
            "vllm/v1/kv_offload/cpu/region.py",
            "pin_region",
            id="host-memory-without-failure-in-an-offload-folder",
        ),
    ],
)
def test_templates_stating_no_failure_of_the_subject_stay_irrelevant(
    text: str, file: str, function: str
) -> None:
    subjects, reason = TEMPLATES.classify(_entry(text, file, function, level="warning"))
    assert subjects == []
    assert reason


def test_every_minor_is_fetched_with_its_first_release_and_its_latest_patch() -> None:
    sources = _tool("vllm_sources")
    from packaging.version import Version

    versions = [
        Version(v)
        for v in (
            "0.2.1",
            "0.2.7",
            "0.20.0",
            "0.20.2",
            "0.20.2rc1",
            "0.6.4.post1",
            "0.6.4",
            "0.34.0",
            "0.1.7",
        )
    ]
    fetched = [str(v) for v in sources.first_and_latest_per_minor(versions)]
    # a minor with one release is fetched once; pre-releases and minors before 0.2 never
    assert fetched == ["0.2.1", "0.2.7", "0.6.4", "0.6.4.post1", "0.20.0", "0.20.2", "0.34.0"]
    # 0.20.x ships only manylinux_2_35 wheels: a platform list without it fetched no 0.20 release
    assert "manylinux_2_35_x86_64" in sources.PLATFORMS


_SIGNATURE_OVER_LINES = """
def check_enough_kv_cache_memory(
    vllm_config,
    needed,
) -> None:
    raise ValueError(f"{needed} GiB KV cache is needed, more than available")


def one_line(): return 1
def after_one_line():
    logger.warning("free memory is less than %s GiB", 3)


class Worker:
    def determine_available_memory(
        self,
    ) -> int:
        raise RuntimeError("no memory left for the cache blocks")
"""


def test_a_template_is_filed_under_its_def_when_the_signature_spans_lines() -> None:
    # the ") -> None:" closing a signature at the def's indentation closes no scope
    functions = [name for name, _ in TEMPLATES.templates_in(_SIGNATURE_OVER_LINES)]
    assert functions == [
        "check_enough_kv_cache_memory",
        "after_one_line",
        "Worker.determine_available_memory",
    ]


def test_call_graph_keeps_a_body_after_a_signature_over_lines(tmp_path: Path) -> None:
    callgraph = _tool("vllm_callgraph")
    path = tmp_path / "kv_cache_utils.py"
    path.write_text(
        "def get_kv_cache_configs(\n    vllm_config,\n) -> list:\n"
        "    check_enough_kv_cache_memory(vllm_config)\n"
    )
    (function,) = callgraph.functions_in(path, "v1/core/kv_cache_utils.py")
    assert function.qualname == "get_kv_cache_configs"
    assert "check_enough_kv_cache_memory" in function.plain_calls


def test_a_plugin_wheel_with_its_modules_under_a_data_folder_is_extracted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zipfile

    import vllm_sources

    def download(dist: str, version: str, into: str) -> None:
        with zipfile.ZipFile(Path(into) / f"{dist}-{version}-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"{dist}-{version}.data/purelib/{dist}/trainer.py", "raise ValueError('x')\n")
            wheel.writestr(f"{dist}-{version}.data/purelib/{dist}/README.md", "not kept")

    monkeypatch.setattr(vllm_sources, "_download_plugin", download)
    monkeypatch.setitem(vllm_sources.SOURCES, "demo", (("demo",), ("1.0",)))
    target = vllm_sources.fetch_plugin("demo", "1.0", tmp_path)
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()) == [
        ".complete",
        "demo/trainer.py",
    ]


# Messages printed without a raise of their own (issue #12 §1): synthetic modules in the shapes vLLM's
# OpenAI server and the wrappers use, so the extraction is tested as a mechanism, not per message.
_BUILT = """
import sys
import warnings


def create_error_response(status_code, message):
    return JSONResponse(ErrorResponse(message=message).dict(), status_code=status_code)


def check_length(request, max_model_len, token_num):
    if token_num > max_model_len:
        return create_error_response(
            HTTPStatus.BAD_REQUEST,
            f"This model's maximum context length is {max_model_len} tokens. "
            f"However, you requested {token_num} tokens.",
        )


class Serving:
    async def handle(self, request):
        if request.suffix is not None:
            return self.create_error_response("suffix is not currently supported")
        return self.create_error_response(message=f"The model `{request.model}` does not exist.",
                                          err_type="NotFoundError")

    def validate(self, length):
        err = MaxLengthError(f"Prompt length ({length}) exceeds the model length")
        self.on_error(err)

    def route(self):
        raise HTTPException(status_code=400, detail="Invalid JSON format")

    def body(self):
        return JSONResponse(content={"error": {"message": "Insufficient KV cache blocks"}}, status_code=503)


def main(free, total):
    warnings.warn(f"Only {free} GiB of {total} GiB free", RuntimeWarning)
    warnings.warn("swap space is large")
    sys.exit(f"Not enough GPU memory: {free} GiB free")
"""


def test_messages_returned_stored_warned_or_exited_are_inventoried() -> None:
    found = {(f.level, f.exception, f.text) for _, f in TEMPLATES.templates_in(_BUILT)}
    assert found >= {
        (
            "response",
            None,
            "This model's maximum context length is {} tokens. However, you requested {} tokens.",
        ),
        ("response", None, "suffix is not currently supported"),
        ("response", None, "The model `{}` does not exist."),
        ("construct", "MaxLengthError", "Prompt length ({}) exceeds the model length"),
        ("raise", "HTTPException", "Invalid JSON format"),
        ("response", None, "Insufficient KV cache blocks"),
        ("warning", "RuntimeWarning", "Only {} GiB of {} GiB free"),
        ("warning", "UserWarning", "swap space is large"),
        ("exit", None, "Not enough GPU memory: {} GiB free"),
    }


def test_a_raised_exception_is_inventoried_once_not_also_as_built() -> None:
    source = 'def f(n):\n    raise ValueError(f"max_model_len ({n}) is too large")\n'
    found = [(f.level, f.text) for _, f in TEMPLATES.templates_in(source)]
    assert found == [("raise", "max_model_len ({}) is too large")]
