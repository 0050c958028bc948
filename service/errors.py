"""Errors the core raises for bad input; the HTTP layer maps each to one problem type.

    VramdocError
    ├── InputError                 the caller gave something we cannot use (HTTP 422, CLI exit 2)
    │   ├── EmptyLogError          no log text at all
    │   ├── UnknownModelError      model id not in the catalog and no config.json given
    │   ├── UnknownGpuError        GPU name not in the catalog
    │   ├── ModelAccessError       a gated or private Hugging Face repo the token cannot read
    │   ├── ModelUnavailableError  the model's config.json could not be reached (Hub down, offline, slow)
    │   └── InvalidConfigError     a config.json or flag value that cannot describe a model/run
    ├── PackError                  a rule pack is malformed (startup fails; names file and field)
    └── SettingsError              an environment variable holds an unusable value (startup fails)

Messages are full sentences that name the thing and the likely cause.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

__all__ = [
    "EmptyLogError",
    "InputError",
    "InvalidConfigError",
    "ModelAccessError",
    "ModelUnavailableError",
    "PackError",
    "SettingsError",
    "UnknownGpuError",
    "UnknownModelError",
    "VramdocError",
]


class VramdocError(Exception):
    """Base of every error vramdoc raises on purpose."""

    problem_type = "about:blank"


class InputError(VramdocError):
    """The caller's input cannot be used; the message says why and what would work."""

    problem_type = "invalid-input"


class EmptyLogError(InputError):
    problem_type = "empty-log"


class BinaryLogError(InputError):
    problem_type = "binary-log"


# The closest known names, or how to find them: a callable is called once, when the message or the
# list is first read. Most unknown names are met by code that only asks whether the catalog knows one
# (a diagnosis sizing a model its log names) and drops the error; ranking names by similarity
# (difflib over every catalog id) cost more than the rest of such a diagnosis's budget.
Suggestions = list[str] | Callable[[], list[str]]


class _WithSuggestions(InputError, abc.ABC):
    """An unknown name and the closest known ones, found when first read (see `Suggestions`)."""

    def __init__(self, suggestions: Suggestions) -> None:
        super().__init__()
        self._suggestions = suggestions

    @property
    def suggestions(self) -> list[str]:
        if callable(self._suggestions):
            self._suggestions = self._suggestions()
        return self._suggestions

    def __str__(self) -> str:
        return self._message()

    @abc.abstractmethod
    def _message(self) -> str: ...


class UnknownModelError(_WithSuggestions):
    problem_type = "unknown-model"

    def __init__(self, model: str, suggestions: Suggestions, searched: str = "the catalog") -> None:
        super().__init__(suggestions)
        self.model = model
        self.searched = searched

    def __reduce__(self) -> tuple[type[UnknownModelError], tuple[str, list[str], str]]:
        return type(self), (self.model, self.suggestions, self.searched)

    def _message(self) -> str:
        hint = f" Closest catalog ids: {', '.join(self.suggestions)}." if self.suggestions else ""
        return (
            f"The model {self.model!r} is not in {self.searched}.{hint} "
            "Paste its Hugging Face config.json to estimate it anyway."
        )


class UnknownGpuError(_WithSuggestions):
    problem_type = "unknown-gpu"

    def __init__(self, gpu: str, suggestions: Suggestions) -> None:
        super().__init__(suggestions)
        self.gpu = gpu

    def __reduce__(self) -> tuple[type[UnknownGpuError], tuple[str, list[str]]]:
        return type(self), (self.gpu, self.suggestions)

    def _message(self) -> str:
        hint = f" Closest catalog names: {', '.join(self.suggestions)}." if self.suggestions else ""
        return (
            f"The GPU {self.gpu!r} is not in the catalog.{hint} "
            "Give its total memory in GiB instead (e.g. 80)."
        )


class InvalidConfigError(InputError):
    problem_type = "invalid-config"


class ModelAccessError(InputError):
    """The Hub refused the repo: gated, private, or the token lacks access."""

    problem_type = "model-access"


class ModelUnavailableError(InputError):
    """No step of the resolution chain could read the model's config.json; the message says which failed."""

    problem_type = "model-unavailable"


class PackError(VramdocError):
    """A rule pack could not be loaded; the message names the file, rule id, field and line."""

    problem_type = "invalid-rule-pack"

    def __init__(
        self,
        file: str,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        rule_id: str | None = None,
    ) -> None:
        self.file = file
        self.path = path
        self.line = line
        self.rule_id = rule_id
        self.reason = message
        where = file if line is None else f"{file}:{line}"
        parts = [where]
        if rule_id:
            parts.append(f"rule {rule_id}")
        if path:
            parts.append(path)
        super().__init__(f"{' '.join(parts)}: {message}")


class SettingsError(VramdocError):
    """A process's environment holds a value it cannot use; the message names the variable."""

    problem_type = "invalid-setting"
