"""From what a person gave to the message the bot posts: the one flow every Slack surface shares.

Parse → add the thread's earlier context → read uploaded files → resolve hosts → fetch snapshots →
ask the service → render → post in the thread → remember the thread. Every failure on the way is
turned into one sentence in the thread; nothing is swallowed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.blocks import (
    Message,
    render_budget,
    render_diagnosis,
    render_error,
    render_help,
    render_preflight,
    render_snapshots,
    scrub,
)
from bot.clients import AgentClient, HostFailure, ServiceClient, ServiceError
from bot.hosts import HostDirectory
from bot.memory import RepliedTo, TeamMemory, ThreadRef, memory_note, promote_fix, with_note
from bot.parse import Ask, parse_ask
from bot.settings import BotSettings
from bot.state import State, ThreadContext
from service.redact import redact
from service.schemas import DiagnoseRequest, Diagnosis, Fingerprint, PreflightRequest, Snapshot

__all__ = [
    "Backends",
    "Place",
    "UserError",
    "answer",
    "compose",
    "help_message",
    "merge",
    "post",
    "read_files",
    "refresh",
]

log = logging.getLogger(__name__)

WORKING = "hourglass_flowing_sand"
DONE = "white_check_mark"
FAILED = "x"


class UserError(Exception):
    """Something the person can fix; `str(exc)` is the one sentence they see."""


class Backends:
    """Everything a listener needs besides Slack's client, built once per process."""

    def __init__(
        self,
        settings: BotSettings,
        *,
        state: State,
        directory: HostDirectory,
        service: ServiceClient,
        agents: AgentClient,
        memory: TeamMemory | None = None,
    ) -> None:
        self.settings = settings
        self.state = state
        self.directory = directory
        self.service = service
        self.agents = agents
        self.memory = memory

    async def close(self) -> None:
        await self.service.close()
        await self.agents.close()
        await self.state.close()
        await self.directory.close()
        if self.memory is not None:
            await self.memory.close()


class Place(msgspec.Struct, frozen=True, kw_only=True):
    """Where to answer: the channel, the thread (None: start one) and the message to react on."""

    channel: str
    thread_ts: str | None = None
    react_ts: str | None = None


# --- files -------------------------------------------------------------------------------------


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _download_allowed(url: str, settings: BotSettings) -> bool:
    """The bot token goes only to Slack's file host (or the configured stand-in of Slack's API)."""
    host = urlsplit(url).hostname or ""
    allowed = {"files.slack.com"}
    if settings.slack_api_url:
        allowed.add(urlsplit(settings.slack_api_url).hostname or "")
    return urlsplit(url).scheme in {"https", "http"} and host in allowed


async def _read_file(client: AsyncWebClient, file_id: str, settings: BotSettings) -> str:
    info = await client.files_info(file=file_id)
    meta: dict[str, Any] = info.get("file") or {}
    name = str(meta.get("name") or file_id)
    size = int(meta.get("size") or 0)
    limit = settings.max_file_bytes
    if size > limit:
        raise UserError(
            f"The file {name} is {_size(size)}; I read files up to {_size(limit)}, "
            "so upload the failing part."
        )
    url = str(meta.get("url_private_download") or meta.get("url_private") or "")
    if not _download_allowed(url, settings):
        raise UserError(f"I cannot download the file {name}: Slack gave no download link I trust.")
    data = bytearray()
    headers = {"Authorization": f"Bearer {settings.bot_token}"}
    try:
        async with (
            httpx.AsyncClient(timeout=10.0, follow_redirects=False) as http,
            http.stream("GET", url, headers=headers) as response,
        ):
            if response.status_code != 200:
                raise UserError(
                    f"Slack answered HTTP {response.status_code} when I downloaded the file {name}."
                )
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > limit:
                    raise UserError(
                        f"The file {name} is larger than {_size(limit)}, the most I read; "
                        "upload the failing part."
                    )
    except httpx.HTTPError as exc:
        raise UserError(f"I could not download the file {name} from Slack ({type(exc).__name__}).") from exc
    return data.decode("utf-8", errors="replace")


async def read_files(
    client: AsyncWebClient, files: Sequence[dict[str, Any]], settings: BotSettings
) -> list[str]:
    """The text of each uploaded file, in order; the first unusable one raises UserError."""
    texts = []
    for file in files:
        file_id = file.get("id")
        if isinstance(file_id, str) and file_id:
            texts.append(await _read_file(client, file_id, settings))
    return texts


# --- the flow ----------------------------------------------------------------------------------


def _join(parts: Sequence[str | None]) -> str | None:
    text = "\n".join(p for p in parts if p and p.strip())
    return text or None


async def _live(
    backends: Backends, hosts: Sequence[str]
) -> tuple[list[Snapshot], list[HostFailure], list[str]]:
    """Snapshots of the named hosts, failures per host, and notes about names nobody registered."""
    if not hosts:
        return [], [], []
    found = await backends.directory.resolve(tuple(hosts))
    notes: list[str] = []
    if found.unknown:
        # Only names the parser took as host-shaped get here; still, name a few and never the fleet.
        named = ", ".join(found.unknown[:_NAMED_UNKNOWN])
        more = len(found.unknown) - _NAMED_UNKNOWN
        names = (
            ("host " if len(found.unknown) == 1 else "hosts ")
            + named
            + (f" and {more} more" if more > 0 else "")
        )
        why = (
            "the agent registry is unreachable right now" if found.registry_down else "no agent registered it"
        )
        notes.append(f"I don't know the {names} ({why}).")
    results = await backends.agents.snapshots(found.found)
    snapshots = [r for r in results if isinstance(r, Snapshot)]
    failures = [r for r in results if isinstance(r, HostFailure)]
    return snapshots, failures, notes


_NAMED_UNKNOWN = 3


async def help_message(backends: Backends, channel: str) -> Message:
    """What the bot understands, with the hosts it can reach where listing them is allowed."""
    if not backends.settings.may_list_hosts(channel):
        return render_help()
    known, _ = await backends.directory.known()
    return render_help(sorted(known))


async def hosts_message(backends: Backends, channel: str) -> Message:
    """The explicit `hosts` command: the registered hosts, where this channel may see them."""
    if not backends.settings.may_list_hosts(channel):
        raise UserError(
            "Listing the registered hosts is turned off in this channel; "
            "ask in a channel named in VRAMDOC_BOT_LIST_HOSTS."
        )
    known, down = await backends.directory.known()
    if down and not known:
        raise UserError("The agent registry is unreachable right now; try again in a minute.")
    if not known:
        raise UserError("No agent has registered a host yet, and the hosts file names none.")
    return render_help(sorted(known))


async def preflight_message(backends: Backends, ask: Ask) -> Message:
    """The pre-flight answer for the command on the first named host (its live snapshot)."""
    if ask.preflight is None:
        raise UserError("I found no launch command to check.")
    if not ask.hosts:
        raise UserError(
            "Name the host to check it on, e.g. `will `vllm serve …` start on gpu-07?`; "
            "mention me with `hosts` to see the registered ones."
        )
    snapshots, failures, notes = await _live(backends, ask.hosts[:1])
    if failures:
        raise UserError(f"I cannot check it on {failures[0].host}: {failures[0].reason}.")
    if not snapshots:
        raise UserError(notes[0] if notes else f"I found no snapshot of {ask.hosts[0]}.")
    request = PreflightRequest(command=ask.preflight, snapshot=snapshots[0], vllm_version=ask.vllm_version)
    return render_preflight(await backends.service.preflight(request))


async def _remembered(
    backends: Backends, diagnosis: Diagnosis, *, this_one: bool
) -> tuple[Diagnosis, Fingerprint | None, str | None]:
    """The diagnosis with the fix that worked before ranked first, its fingerprint, and the memory line.

    `this_one`: the answer being composed is a new sighting (not yet recorded), so it is counted.
    """
    print_ = diagnosis.fingerprint
    if print_ is None or backends.memory is None:
        return diagnosis, print_, None
    sighting = await backends.memory.recall(print_.key)
    if sighting is None or sighting.count + int(this_one) < 2:
        return diagnosis, print_, None
    fix_title = None
    if sighting.fixed_by is not None:
        promoted = promote_fix(diagnosis.fixes, sighting.fixed_by)
        if promoted is not diagnosis.fixes:
            diagnosis = msgspec.structs.replace(diagnosis, fixes=promoted)
            fix_title = promoted[0].title
    return diagnosis, print_, memory_note(sighting, this_one=this_one, fix_title=fix_title)


async def compose(
    backends: Backends,
    context: ThreadContext,
    *,
    all_fixes: bool = False,
    turn: _Turn | None = None,
) -> Message:
    """The reply for everything the thread has given so far (already merged into `context`).

    With `turn` (a new answer, not a rebuilt one) the diagnosis's fingerprint is left in it, to be
    recorded once the reply is posted.
    """
    snapshots, failures, notes = await _live(backends, context.hosts)
    if context.log:
        request = DiagnoseRequest(
            log=context.log,
            command=context.command,
            vllm_version=context.vllm_version,
            snapshot=snapshots[0] if snapshots else None,
        )
        diagnosis = await backends.service.diagnose(request)
        diagnosis, print_, note = await _remembered(backends, diagnosis, this_one=turn is not None)
        if turn is not None:
            turn.fingerprint = print_
            turn.top_fix = diagnosis.fixes[0].id if diagnosis.fixes else None
        message = render_diagnosis(
            diagnosis,
            snapshots=snapshots,
            failures=failures,
            hosts=[s.host for s in snapshots] + [f.host for f in failures],
            notes=notes,
            all_fixes=all_fixes,
            fix_buttons=backends.memory is not None,
        )
        return with_note(message, note) if note else message
    if not snapshots and not failures:
        raise UserError(notes[0] if notes else "I found nothing to look at.")
    return render_snapshots(
        snapshots, failures, hosts=[*(s.host for s in snapshots), *(f.host for f in failures)], notes=notes
    )


def merge(ask: Ask, files: Sequence[str], earlier: ThreadContext | None) -> ThreadContext:
    """A follow-up combines with the thread: a new log replaces the old, new hosts replace old hosts."""
    earlier = earlier or ThreadContext()
    new_log = _join([ask.log, *files])
    command = redact(ask.command) if new_log and ask.command else None
    return ThreadContext(
        log=redact(new_log) if new_log else earlier.log,
        command=command if new_log else earlier.command,
        hosts=ask.hosts or earlier.hosts,
        vllm_version=ask.vllm_version or earlier.vllm_version,
        estimate=earlier.estimate,
    )


async def _react(client: AsyncWebClient, place: Place, name: str, *, remove: bool = False) -> None:
    if place.react_ts is None:
        return
    try:
        if remove:
            await client.reactions_remove(channel=place.channel, timestamp=place.react_ts, name=name)
        else:
            await client.reactions_add(channel=place.channel, timestamp=place.react_ts, name=name)
    except SlackApiError as exc:
        log.warning("reaction %s on %s failed: %s", name, place.react_ts, exc.response.get("error"))


async def post(
    client: AsyncWebClient, place: Place, message: Message, *, update_ts: str | None = None
) -> str:
    """Post (or update) the message in the thread, then upload its report file there; returns its ts.

    Everything leaves through here, so everything is scrubbed here, whatever rendered it.
    """
    message = scrub(message)
    if update_ts is not None:
        result = await client.chat_update(
            channel=place.channel, ts=update_ts, text=message.text, blocks=message.blocks
        )
    else:
        result = await client.chat_postMessage(
            channel=place.channel,
            thread_ts=place.thread_ts,
            text=message.text,
            blocks=message.blocks,
            unfurl_links=False,
            unfurl_media=False,
        )
    ts = str(result.get("ts") or update_ts or "")
    if message.upload is not None:
        thread = place.thread_ts or ts
        try:
            await client.files_upload_v2(
                channel=place.channel,
                thread_ts=thread,
                content=message.upload.content,
                filename=message.upload.filename,
                title=message.upload.title,
            )
        except SlackApiError as exc:
            error = exc.response.get("error")
            log.error("uploading %s into %s failed: %s", message.upload.filename, place.channel, error)
            await client.chat_postMessage(
                channel=place.channel,
                thread_ts=thread,
                text=f"I could not attach the full report ({error}); the answer above is shortened.",
            )
    return ts


class _Turn:
    """One message being answered: what it asked, and the thread context it adds up to."""

    def __init__(self) -> None:
        self.ask: Ask | None = None
        self.context: ThreadContext | None = None
        self.fingerprint: Fingerprint | None = None
        self.top_fix: str | None = None


async def _understand(
    backends: Backends,
    client: AsyncWebClient,
    place: Place,
    text: str,
    files: Sequence[dict[str, Any]],
    turn: _Turn,
) -> None:
    """Fill `turn` from the message, its files and the thread; raises UserError when nothing is usable."""
    ask = turn.ask = parse_ask(text)
    if ask.help or ask.list_hosts or ask.preflight is not None:
        return
    earlier = None
    if place.thread_ts is not None:
        earlier = await backends.state.load_thread(place.channel, place.thread_ts)
    if ask.estimate is not None:
        turn.context = msgspec.structs.replace(earlier or ThreadContext(), estimate=ask.estimate)
        return
    if _names_only_a_version(ask, files) and earlier is not None and earlier.estimate is not None:
        # the answer to the bot's question "which vLLM version?": the same sizing on that release
        sizing = msgspec.structs.replace(earlier.estimate, vllm_version=ask.vllm_version)
        turn.ask = msgspec.structs.replace(ask, estimate=sizing)
        turn.context = msgspec.structs.replace(earlier, estimate=sizing)
        return
    file_texts = await read_files(client, files, backends.settings)
    if ask.empty and not file_texts and earlier is None:
        raise UserError(
            "I found no log, host name or sizing question in that message; "
            "mention me with `help` to see what I understand."
        )
    turn.context = merge(ask, file_texts, earlier)
    if not turn.context.log and not turn.context.hosts:
        raise UserError("This thread has no log or host for me yet; paste the log or name a host.")


def _names_only_a_version(ask: Ask, files: Sequence[dict[str, Any]]) -> bool:
    return ask.vllm_version is not None and not (ask.log or ask.hosts or files)


async def _reply(backends: Backends, place: Place, turn: _Turn) -> Message:
    if turn.ask is not None and turn.ask.help:
        return await help_message(backends, place.channel)
    if turn.ask is not None and turn.ask.list_hosts:
        return await hosts_message(backends, place.channel)
    if turn.ask is not None and turn.ask.estimate is not None:
        return render_budget(await backends.service.estimate(turn.ask.estimate))
    if turn.ask is not None and turn.ask.preflight is not None:
        return await preflight_message(backends, turn.ask)
    if turn.context is None:
        raise UserError("I found nothing to look at.")
    return await compose(backends, turn.context, turn=turn)


async def _record(backends: Backends, client: AsyncWebClient, place: Place, ts: str, turn: _Turn) -> None:
    """Remember where this failure was answered (with Slack's permalink), for the next time it comes."""
    if backends.memory is None or turn.fingerprint is None or not ts:
        return
    permalink = None
    try:
        result = await client.chat_getPermalink(channel=place.channel, message_ts=ts)
        permalink = str(result.get("permalink") or "") or None
    except SlackApiError as exc:
        log.warning("no permalink for %s in %s: %s", ts, place.channel, exc.response.get("error"))
    hosts = turn.context.hosts if turn.context is not None else ()
    where = ThreadRef(channel=place.channel, ts=ts, permalink=permalink)
    await backends.memory.record(turn.fingerprint, where, hosts)
    replied = RepliedTo(key=turn.fingerprint.key, thread_ts=place.thread_ts or ts, top_fix=turn.top_fix)
    await backends.memory.remember_reply(where, replied)


async def answer(
    backends: Backends,
    client: AsyncWebClient,
    place: Place,
    text: str,
    files: Sequence[dict[str, Any]] = (),
) -> bool:
    """Answer one message in its thread, swapping the working reaction for the outcome; False if unposted.

    The thread's context is saved even when the answer is an error (service down), so a retry or
    a follow-up in the thread still has the log.
    """
    await _react(client, place, WORKING)
    turn = _Turn()
    try:
        await _understand(backends, client, place, text, files, turn)
        message = await _reply(backends, place, turn)
    except (UserError, ServiceError) as exc:
        message = render_error(str(exc))
    except Exception as exc:
        log.exception("answering a message in %s failed", place.channel)
        message = render_error(
            f"Something went wrong inside vramdoc ({type(exc).__name__}); it is logged, please try again."
        )
    ok = not message.failed
    try:
        ts = await post(client, place, message)
    except SlackApiError as exc:
        log.error("posting the reply in %s failed: %s", place.channel, exc.response.get("error"))
        ok, ts = False, ""
    if turn.context is not None and (place.thread_ts or ts):
        await backends.state.save_thread(place.channel, place.thread_ts or ts, turn.context)
    if ok:
        await _record(backends, client, place, ts, turn)
    await _react(client, place, WORKING, remove=True)
    await _react(client, place, DONE if ok else FAILED)
    return bool(ts)


async def refresh(
    backends: Backends,
    client: AsyncWebClient,
    place: Place,
    message_ts: str,
    *,
    hosts: tuple[str, ...] | None = None,
    all_fixes: bool = False,
) -> None:
    """Rebuild a posted answer in place (all fixes, or fresh snapshots) from the thread's context."""
    thread_ts = place.thread_ts or message_ts
    earlier = await backends.state.load_thread(place.channel, thread_ts) or ThreadContext()
    context = earlier if hosts is None else msgspec.structs.replace(earlier, hosts=hosts)
    update: str | None = message_ts
    try:
        if not context.log and not context.hosts:
            raise UserError("I no longer remember this thread's log; paste it again and I will answer anew.")
        message = await compose(backends, context, all_fixes=all_fixes)
    except (UserError, ServiceError) as exc:
        message, update = render_error(str(exc)), None
    except Exception as exc:
        log.exception("refreshing %s in %s failed", message_ts, place.channel)
        message, update = (
            render_error(
                f"Something went wrong inside vramdoc ({type(exc).__name__}); it is logged, please try again."
            ),
            None,
        )
    try:
        await post(client, msgspec.structs.replace(place, thread_ts=thread_ts), message, update_ts=update)
    except SlackApiError as exc:
        log.error("updating %s in %s failed: %s", message_ts, place.channel, exc.response.get("error"))
        return
    if hosts is not None and update is not None:
        await backends.state.save_thread(place.channel, thread_ts, context)
