"""The one reader of a vLLM launch command, in every form people paste it.

Forms: a shell line (`vllm serve …`, `python -m vllm.entrypoints.openai.api_server …`, another
program's module that takes vLLM's engine arguments (`python -m fastchat.serve.vllm_worker …`),
`docker run … vllm/vllm-openai …`, `KEY=value` prefixes, `\\` continuations), Python keyword
arguments (`LLM(model="…", max_model_len=8192)`, `EngineArgs(…)`), the `Namespace(…)` vLLM logs
at start-up, an env file (`KEY=value` lines) and a compose service (`command:` as a YAML list or a
string, `environment:`). Each becomes the same thing: environment pairs, the words before vLLM's
own arguments, and vLLM's arguments, each flag with its values. Flags are spelled the way vLLM's
help spells them (`--max_model_len` → `--max-model-len`, `-tp` → `--tensor-parallel-size`, from the
alias table in `rules/fixes/flags.yaml`); values stay as typed, so the diagnosis (facts, flag
findings) and the fixes (the corrected command) read one parse. Shell words come from `shlex`,
Python forms from `ast` (`literal_eval` of each keyword), compose from PyYAML.
"""

from __future__ import annotations

import ast
import io
import re
import shlex
import tokenize
from collections.abc import Collection, Iterator, Mapping
from typing import Literal

import msgspec

from service.first_use import first_use_re

__all__ = [
    "Argument",
    "LaunchCommand",
    "LaunchForm",
    "canonical_flag",
    "parse_launch",
    "python_call_open",
    "spelled_flag",
]

LaunchForm = Literal["shell", "python", "namespace", "env", "compose"]

# Flags that take no value whatever the history says (argparse store_true / BooleanOptionalAction).
_SWITCH_PREFIXES = ("--enable-", "--disable-", "--no-")
_SWITCHES = frozenset({"--enforce-eager", "--trust-remote-code", "--help", "--version"})
_FLAG = first_use_re(r"^--?[A-Za-z][A-Za-z0-9_.\-]*(=.*)?$")
_ENV = first_use_re(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_ENV_LINE = first_use_re(r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*=")
_CALL = first_use_re(r"\b(LLM|AsyncLLMEngine\.from_engine_args|EngineArgs|AsyncEngineArgs|Namespace)\s*\(")
_COMPOSE_COMMAND = first_use_re(r"^\s*command\s*:", re.MULTILINE)
_VLLM_MODULE = first_use_re(r"^vllm\.entrypoints\.(?:openai\.)?api_server$")
# Another program's module that takes vLLM's engine arguments (`python -m fastchat.serve.vllm_worker
# --tensor-parallel-size 4` adds AsyncEngineArgs' flags to its own parser): one named for vLLM.
_WRAPPER_MODULE = first_use_re(r"^(?:\w+\.)+\w*vllm\w*$|^\w*vllm\w*(?:\.\w+)+$")
_SENTENCE_MARK = first_use_re(r"[，。；！？、]")
_VLLM_IMAGE = first_use_re(r"^(?:[\w.\-]+/)*vllm-openai(?::\S+)?$")
# `Namespace(…)` repr holds values Python cannot read back (`<class …>`, `<function …>`).
_UNREADABLE_REPR = first_use_re(r"<[^<>]*>")
# Namespace fields that are not flags: the subcommand and the positional model of `vllm serve`.
_NAMESPACE_RENAMES = {"model_tag": "model"}
_NAMESPACE_SKIPPED = frozenset({"subparser", "dispatch_function"})


def spelled_flag(flag: str, aliases: Mapping[str, str] | None = None) -> str:
    """The flag as vLLM's help spells it: dashes for underscores, short options (`-tp`) expanded."""
    if flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-")
    return (aliases or {}).get(flag, flag)


def canonical_flag(flag: str, aliases: Mapping[str, str] | None = None) -> str:
    """The setting a flag changes: its spelling, then `alias_of` (`--device-memory-utilization`
    sets `--gpu-memory-utilization`). `aliases` is `FixPack.aliases`, from rules/fixes/flags.yaml."""
    name = spelled_flag(flag, aliases)
    return (aliases or {}).get(name, name)


class Argument(msgspec.Struct, frozen=True):
    """One flag with its values, or one positional word (`flag` None)."""

    flag: str | None  # the setting it changes (canonical_flag)
    tokens: tuple[str, ...]  # exactly as typed, flag token included
    name: str | None = None  # as spelled (spelled_flag): what the version checks read
    values: tuple[str, ...] = ()


class LaunchCommand(msgspec.Struct, frozen=True):
    """A launch command split into environment, launcher words and vLLM's arguments."""

    form: LaunchForm
    env: tuple[tuple[str, str], ...]
    prefix: tuple[str, ...]  # the words before vLLM's own arguments (`vllm serve`, `docker run …`)
    args: tuple[Argument, ...]
    flags: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    aliases: Mapping[str, str] = msgspec.field(default_factory=dict)
    callee: str | None = None  # the Python form's call: `LLM`, `EngineArgs`, `Namespace`, …

    @property
    def entrypoint(self) -> Literal["serve", "llm"] | None:
        """`llm` for the `LLM(...)` class, `serve` for the API server; their defaults differ."""
        if self.callee == "LLM":
            return "llm"
        words = " ".join(self.prefix)
        if re.search(r"\bvllm serve\b|vllm\.entrypoints\.(openai\.)?api_server", words):
            return "serve"
        return None

    def value(self, flag: str) -> str | None:
        """The flag's last value as typed, or None when the flag is absent or a switch."""
        values = self.flags.get(canonical_flag(flag, self.aliases))
        return values[-1] if values else None

    def has(self, flag: str) -> bool:
        return canonical_flag(flag, self.aliases) in self.flags

    def env_value(self, name: str) -> str | None:
        found = [value for key, value in self.env if key == name]
        return found[-1] if found else None

    @property
    def memory_limit(self) -> str | None:
        """The container's memory limit as typed (`docker run -m 16g` / `--memory=16g` before the
        image), or None: the host RAM the whole of vLLM may use."""
        if not {"docker", "podman"} & set(self.prefix[:2]):  # `sudo docker run …` too
            return None
        found = None
        for index, token in enumerate(self.prefix):
            name, eq, inline = token.partition("=")
            if name in ("-m", "--memory"):
                found = inline if eq else (self.prefix[index + 1] if index + 1 < len(self.prefix) else None)
            elif token.startswith("-m") and len(token) > 2 and token[2].isdigit():
                found = token[2:]  # `-m16g`
        return found

    @property
    def model(self) -> str | None:
        """The positional model right after `vllm serve` / the image name, when there is one."""
        first = self.args[0] if self.args else None
        if self.prefix and first is not None and first.flag is None and _looks_like_model(first.tokens[0]):
            return first.tokens[0]
        return None


def parse_launch(
    text: str, aliases: Mapping[str, str] | None = None, switches: Collection[str] = ()
) -> LaunchCommand:
    """Read `text` in whichever form it has; `switches` are flags known to take no value."""
    aliases = aliases or {}
    if (call := _python_call(text)) is not None:
        form, callee, tokens = call
        return msgspec.structs.replace(
            _split(form, [], tokens, aliases, switches, find_start=False), callee=callee
        )
    if _COMPOSE_COMMAND.search(text) and (compose := _compose(text)) is not None:
        env, tokens = compose
        return _split("compose", env, tokens, aliases, switches)
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if lines and all(_is_env_line(line) for line in lines):
        return LaunchCommand(form="env", env=tuple(_env_file(lines)), prefix=(), args=(), aliases=aliases)
    env, tokens = _shell(text)
    return _split("shell", env, tokens, aliases, switches)


def _shell(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    command = text.split("`", 1)[0]  # an inline code span ends the command
    # so does a full-width mark a sentence goes on with (`--gpu-memory-utilization 0.3，80G的显卡…`):
    # no shell word of a command holds one
    command = _SENTENCE_MARK.split(command, 1)[0]
    joined = re.sub(r"\\\s*\r?\n", " ", command)
    env: list[tuple[str, str]] = []
    # `export X=1` lines before the command are its environment
    kept = []
    for line in joined.splitlines():
        if _ENV_LINE.match(line) and line.lstrip().startswith("export "):
            env.extend(_env_file([line]))
        else:
            kept.append(line)
    try:
        tokens = shlex.split(" ".join(kept))
    except ValueError:  # an unclosed quote: words as typed rather than nothing
        tokens = " ".join(kept).split()
    while tokens and (match := _ENV.match(tokens[0])):
        env.append((match.group(1), match.group(2)))
        tokens.pop(0)
    if tokens and tokens[0] == "env":
        tokens.pop(0)
        while tokens and (match := _ENV.match(tokens[0])):
            env.append((match.group(1), match.group(2)))
            tokens.pop(0)
    return env, tokens


def _is_env_line(line: str) -> bool:
    """`KEY=value` or `export KEY=value` alone: `KEY=value vllm serve …` is a command."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return False
    words = words[1:] if words[:1] == ["export"] else words
    return len(words) == 1 and _ENV.match(words[0]) is not None


def _env_file(lines: list[str]) -> Iterator[tuple[str, str]]:
    for line in lines:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        for word in words:
            if match := _ENV.match(word):
                yield match.group(1), match.group(2)


def _python_call(text: str) -> tuple[LaunchForm, str, list[str]] | None:
    """`LLM(…)`/`EngineArgs(…)`/`Namespace(…)` keywords as `--flag value` words, read by `ast`."""
    match = _CALL.search(text)
    if match is None:
        return None
    form: LaunchForm = "namespace" if match.group(1) == "Namespace" else "python"
    source = text[match.start() :]
    if form == "namespace":
        source = _UNREADABLE_REPR.sub("None", source)
    call = _first_call(source)
    if call is None:
        return None
    tokens: list[str] = []
    if call.args and form == "python":
        try:
            model = ast.literal_eval(call.args[0])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            model = None
        if isinstance(model, str):
            tokens += ["--model", model]
    for keyword in call.keywords:
        if keyword.arg is None or keyword.arg in _NAMESPACE_SKIPPED:
            continue
        try:
            value = ast.literal_eval(keyword.value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue  # a value that is not a literal (a config object, a variable) states nothing
        flag = "--" + _NAMESPACE_RENAMES.get(keyword.arg, keyword.arg).replace("_", "-")
        if value is True:
            tokens.append(flag)
        elif value is False:
            tokens.append("--no-" + flag.removeprefix("--"))
        elif isinstance(value, (str, int, float)):
            tokens += [flag, str(value)]
        elif (
            isinstance(value, (list, tuple))
            and value
            and all(isinstance(v, (str, int, float)) for v in value)
        ):
            tokens += [flag, *map(str, value)]
    return form, match.group(1), tokens


def _first_call(source: str) -> ast.Call | None:
    """The call expression that starts `source`, ended by its matching `)`; a call the paste cut
    off before its `)` is read up to its last whole argument (the keywords typed before the cut)."""
    end, cut = _call_end(source)
    if end is None and cut is not None:
        source, end = source[:cut] + ")", cut + 1
    if end is None:
        return None
    try:
        tree = ast.parse(source[:end], mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    return tree.body if isinstance(tree.body, ast.Call) else None


def _call_end(source: str) -> tuple[int | None, int | None]:
    """Where the call that starts `source` ends (after its matching `)`), else, when the text ends
    inside it, where its last whole top-level argument ends (one `tokenize` pass, so a long paste
    costs one read, not one parse per bracket)."""
    depth, last_comma = 0, None
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.OP or token.string not in "()[]{},":
                continue
            if token.string == ",":
                if depth == 1:
                    last_comma = _offset(source, token.start)
                continue
            depth += 1 if token.string in "([{" else -1
            if depth == 0:
                return _offset(source, token.end), None
    except (tokenize.TokenError, SyntaxError, ValueError, MemoryError, RecursionError):
        return None, last_comma
    return None, last_comma


def python_call_open(text: str) -> bool:
    """Whether `text` holds a Python call (`LLM(`, `EngineArgs(`) that it does not close: a call
    pasted over several lines goes on on the next ones."""
    match = _CALL.search(text)
    return match is not None and _call_end(text[match.start() :])[0] is None


def _offset(source: str, position: tuple[int, int]) -> int:
    """`tokenize`'s (line, column) as an index into `source` (lines as `readline` splits them)."""
    line, column = position
    before = io.StringIO(source).readlines()[: line - 1]
    return sum(map(len, before)) + column


def _compose(text: str) -> tuple[list[tuple[str, str]], list[str]] | None:
    """A compose file or service: its `command:` words and `environment:` pairs."""
    import yaml  # imported only for a compose paste, as the packs do

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(document, dict):
        return None
    services = document.get("services")
    # a whole file, one service pasted with its name, or the service's own keys
    candidates = list(services.values()) if isinstance(services, dict) else [document, *document.values()]
    for service in candidates:
        if not isinstance(service, dict) or "command" not in service:
            continue
        command = service["command"]
        if isinstance(command, str):
            _, tokens = _shell(command)
        elif isinstance(command, list):
            tokens = [str(word) for word in command if isinstance(word, (str, int, float))]
        else:
            continue
        return _compose_env(service.get("environment")), tokens
    return None


def _compose_env(environment: object) -> list[tuple[str, str]]:
    if isinstance(environment, dict):
        return [(str(key), str(value)) for key, value in environment.items() if value is not None]
    if isinstance(environment, list):
        return [(m.group(1), m.group(2)) for item in environment if (m := _ENV.match(str(item)))]
    return []


def _is_switch(flag: str, switches: Collection[str]) -> bool:
    return flag in switches or flag in _SWITCHES or flag.startswith(_SWITCH_PREFIXES)


def _vllm_start(tokens: list[str]) -> int:
    """Index just after `vllm serve` / `-m vllm.entrypoints…api_server` / the image name, else 0."""
    for index, token in enumerate(tokens):
        if token == "serve" and index > 0 and tokens[index - 1].endswith("vllm"):
            return index + 1
        if _VLLM_MODULE.match(token) or _VLLM_IMAGE.match(token):
            return index + 1
        if index > 0 and tokens[index - 1] == "-m" and _WRAPPER_MODULE.match(token):
            return index + 1
    return 0


def _split(
    form: LaunchForm,
    env: list[tuple[str, str]],
    tokens: list[str],
    aliases: Mapping[str, str],
    switches: Collection[str],
    *,
    find_start: bool = True,
) -> LaunchCommand:
    start = _vllm_start(tokens) if find_start else 0
    prefix, rest = tuple(tokens[:start]), tokens[start:]
    args: list[Argument] = []
    flags: dict[str, tuple[str, ...]] = {}
    i = 0
    while i < len(rest):
        token = rest[i]
        if not _FLAG.match(token):
            args.append(Argument(None, (token,)))
            i += 1
            continue
        typed, eq, inline = token.partition("=")
        name = spelled_flag(typed, aliases)
        flag = aliases.get(name, name)
        if eq:
            values: tuple[str, ...] = (inline,)
            taken: tuple[str, ...] = (token,)
            i += 1
        elif _is_switch(name, switches):
            values, taken = (), (token,)
            i += 1
        else:
            j = i + 1
            while j < len(rest) and not _FLAG.match(rest[j]):
                j += 1
            values, taken = tuple(rest[i + 1 : j]), tuple(rest[i:j])
            i = j
        args.append(Argument(flag, taken, name, values))
        flags[flag] = values
    return LaunchCommand(
        form=form, env=tuple(env), prefix=prefix, args=tuple(args), flags=flags, aliases=aliases
    )


def _looks_like_model(token: str) -> bool:
    return bool(re.match(r"^[\w.\-~/]+$", token))
