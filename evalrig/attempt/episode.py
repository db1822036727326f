"""The episode relay (docs/episodes.md): an agent and its task's driver, each in its own
sandbox, talking one JSON frame per line through the rig, which checks every frame,
enforces the turn rule and the bounds, and writes transcript.jsonl as it goes.

Event-driven: one selector over the four pipes and the two "launch ended" pipes; every
write is non-blocking with its own pending buffer, so neither side can stall the rig by
not reading, and nothing is polled. Each process runs under sandbox.launch on a thread of
its own (its limits, its containment, its stderr), with stdin and stdout handed to the
relay through a sandbox.Channel.

Choices the contract leaves open, written down here and in docs/episodes.md:
- A reply to an assistant message without tool calls holds one or more `user` messages;
  an empty reply, or any other role, is the driver's fault.
- A line the agent writes after `end` makes the termination `agent_error` (when the
  verifier would otherwise decide); only the first such line is kept.
- A driver line is capped at DRIVER_LINE_CAP bytes; an agent line at the task's
  max_output_bytes. Beyond either the episode ends at once (driver_fault, agent_error).
- After `finish` the driver has driver_timeout_s to exit 0; anything else is driver_fault.
- What a side wrote after its last newline when its stdout ended is no frame: kept as raw
  text (reason core.episode.UNTERMINATED); the agent's is agent_error (after `end` too, where
  the verifier would otherwise decide), the driver's is driver_fault before the end.
- transcript.jsonl: each line is written whole, with one write(), before the frame it
  records moves on, so a kill -9 of the rig leaves every line up to the kill (the page
  cache outlives the process); the file is fsynced once, when the episode ends, before the
  attempt's result is written. A per-line fsync would cost a disk round trip (~3-4 ms on
  this machine's ext4) per frame, four per turn, for nothing a kill -9 could lose: only a
  crash of the machine mid-episode could, and its attempt runs again anyway.
"""

from __future__ import annotations

import os
import selectors
import shutil
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from evalrig.attempt import sandbox
from evalrig.attempt.streams import Redactor, scan
from evalrig.core.digest import canonical_line
from evalrig.core.episode import (
    AFTER_END,
    UNTERMINATED,
    VERIFIER_DECIDES,
    BadFrame,
    agent_frame,
    driver_frame,
    parse_object,
    prefix,
    tool_errors,
    tool_reply_problem,
)
from evalrig.models.episode import DriverEndFrame, ReplyFrame, SessionFrame
from evalrig.models.inputs import EpisodeSection
from evalrig.store.jsonl import Journal
from evalrig.store.layout import DRIVER_DIR, TRANSCRIPT

GRACE_S = 2.0
DRIVER_LINE_CAP = 16 << 20
STDERR_TAIL = 2000
DRIVER_AT_FAULT = "the task's driver is at fault"
"""How a driver_fault's result error starts (run.findings names the task from it)."""
_READ = 1 << 16


@dataclass
class EpisodeOutcome:
    """How the episode ended and what it cost, for the attempt's records."""

    termination: str | None = None
    error: str | None = None
    agent: sandbox.Finished | None = None
    driver: sandbox.Finished | None = None
    interrupted: bool = False
    infra_error: str | None = None  # the rig could not run the episode (not the driver's fault)
    agent_fed: bool = False  # the agent was sent its first input (the session frame): docs/attempts.md
    turns: int = 0
    usage: dict[str, float | int | None] = field(default_factory=dict)
    canary_in: list[str] = field(default_factory=list)


class _Side:
    """One process of the episode: its launch on a thread and the relay's pipe ends."""

    def __init__(self, name: str, start: Callable[[sandbox.Channel], sandbox.Finished],
                 line_cap: int) -> None:
        self.name = name
        in_r, self.w = os.pipe2(os.O_CLOEXEC)
        self.r, out_w = os.pipe2(os.O_CLOEXEC)
        sandbox.running._widen_pipe(self.w)
        os.set_blocking(self.w, False)
        os.set_blocking(self.r, False)
        self.done_r, self.done_w = os.pipe2(os.O_CLOEXEC)
        self.channel = sandbox.Channel(in_r, out_w)
        self.line_cap = line_cap
        self.partial = bytearray()
        self.pending = bytearray()
        self.close_after = False
        self.finished: sandbox.Finished | None = None
        self.failure: BaseException | None = None
        self.ended = False  # its launch returned
        self.reading = True
        self.thread = threading.Thread(target=self._run, args=(start,), name=f"evalrig-{name}", daemon=True)

    def _run(self, start: Callable[[sandbox.Channel], sandbox.Finished]) -> None:
        try:
            self.finished = start(self.channel)
        except BaseException as e:  # noqa: BLE001 - reported by the relay as a rig fault
            self.failure = e
        finally:
            self.channel.release()
            os.write(self.done_w, b"x")

    def close(self) -> None:
        for fd in (self.w, self.r, self.done_r, self.done_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.w = self.r = self.done_r = self.done_w = -1
        self.channel.close()


class Relay:
    """One episode, from the two launches to the last transcript line."""

    def __init__(self, *, episode: EpisodeSection, max_output_bytes: int, deadline_s: float,
                 transcript: Path, task_id: str, attempt_id: str, seed: int,
                 start_agent: Callable[[sandbox.Channel], sandbox.Finished],
                 start_driver: Callable[[sandbox.Channel], sandbox.Finished],
                 driver_stderr: Path, secrets: Mapping[str, str],
                 cancel: threading.Event | None = None,
                 metered_cost: Callable[[], float] | None = None) -> None:
        self.ep = episode
        self.max_output = max_output_bytes
        self.deadline_s = deadline_s
        self.path = transcript
        self.start_frame = {"type": "start", "task_id": task_id, "attempt_id": attempt_id, "seed": seed}
        self.agent = _Side("agent", start_agent, max_output_bytes)
        self.driver = _Side("driver", start_driver, DRIVER_LINE_CAP)
        self.driver_stderr = driver_stderr
        self.secrets = {k: v for k, v in secrets.items() if v}
        self.cancel = cancel
        # Under the model gateway, `[episode] max_cost_usd` sums the candidate's metered
        # spend (docs/gateway.md), never what its frames report.
        self.metered_cost = metered_cost
        self.out = EpisodeOutcome()
        self.seq = 0
        self.history: list[Any] = []  # chat messages exchanged with the agent, as recorded
        self.state = "session"  # session | agent | driver | over
        self.wait_until: float | None = None  # the current turn's or answer's limit
        self.calls: list[str] = []  # tool-call ids of the assistant message the driver answers
        self.tool_errors = 0
        self.cost = 0.0
        self.tokens = {"input_tokens": 0, "output_tokens": 0}
        self.reported = {"cost_usd": False, "input_tokens": False, "output_tokens": False}
        self.after_end_seen = False
        self.grace_until: float | None = None
        self.finish_until: float | None = None

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> EpisodeOutcome:
        self.t0 = time.monotonic()
        self.wall_until = self.t0 + self.deadline_s
        self.sel = selectors.DefaultSelector()
        self.journal = Journal(self.path.parent, (self.path.name,))
        try:
            for side in (self.agent, self.driver):
                self.sel.register(side.r, selectors.EVENT_READ, (side, "read"))
                self.sel.register(side.done_r, selectors.EVENT_READ, (side, "done"))
                side.thread.start()
            self._record("rig", "driver", frame=self.start_frame)
            self._send(self.driver, self.start_frame)
            self.wait_until = self.t0 + self.ep.driver_timeout_s
            while not (self.agent.ended and self.driver.ended):
                timeout = self._next_limit()
                events = self.sel.select(None if timeout is None else max(timeout - time.monotonic(), 0))
                for key, _ in events:
                    side, what = key.data
                    if what == "read":
                        self._read(side)
                    elif what == "write":
                        self._flush(side)
                    else:
                        self._done(side)
                self._limits(time.monotonic())
        finally:
            for side in (self.agent, self.driver):
                if side.thread.is_alive():
                    side.channel.stop()
                    side.thread.join()
            self.sel.close()
            for side in (self.agent, self.driver):
                side.close()
            self.journal.close()  # the one fsync: before the attempt's result is written
        self.out.agent, self.out.driver = self.agent.finished, self.driver.finished
        self._usage()
        return self.out

    def _next_limit(self) -> float | None:
        limits = [t for t in (self.wall_until if self.state != "over" else None, self.wait_until,
                              self.grace_until, self.finish_until) if t is not None]
        return min(limits) if limits else None

    def _limits(self, now: float) -> None:
        if self.state != "over":
            if now >= self.wall_until:
                self._end("agent_timeout", f"the task's timeout_s ({self.deadline_s:g} s) ran out")
            elif self.wait_until is not None and now >= self.wait_until:
                if self.state == "agent":
                    self._end("agent_timeout", f"the agent did not answer within turn_timeout_s "
                              f"({self.ep.turn_timeout_s:g} s)")
                else:
                    self._end("driver_fault", f"the driver did not answer within driver_timeout_s "
                              f"({self.ep.driver_timeout_s:g} s)")
        if self.grace_until is not None and now >= self.grace_until:
            self.grace_until = None
            self.agent.channel.stop()
        if self.finish_until is not None and now >= self.finish_until:
            self.finish_until = None
            if not self.driver.ended:
                self._fault_after(f"the driver did not exit within driver_timeout_s "
                                  f"({self.ep.driver_timeout_s:g} s) of finish")
            self.driver.channel.stop()

    # -- pipes -----------------------------------------------------------------------------

    def _send(self, side: _Side, frame: dict[str, Any], close: bool = False) -> None:
        if side.w < 0:
            return
        side.pending += canonical_line(frame)
        side.close_after = side.close_after or close
        self._flush(side)

    def _flush(self, side: _Side) -> None:
        while side.pending and side.w >= 0:
            try:
                n = os.write(side.w, side.pending)
            except BlockingIOError:
                break
            except OSError:  # it closed its stdin or is gone: nothing more reaches it
                side.pending.clear()
                break
            del side.pending[:n]
        self._watch_write(side)
        if not side.pending and side.close_after and side.w >= 0:
            self._unwatch(side.w)
            os.close(side.w)
            side.w = -1

    def _watch_write(self, side: _Side) -> None:
        if side.w < 0:
            return
        key = self.sel.get_map().get(side.w)
        if side.pending and key is None:
            self.sel.register(side.w, selectors.EVENT_WRITE, (side, "write"))
        elif not side.pending and key is not None:
            self.sel.unregister(side.w)

    def _unwatch(self, fd: int) -> None:
        if fd in self.sel.get_map():
            self.sel.unregister(fd)

    def _read(self, side: _Side) -> bool:
        """One read from a side's stdout, its complete lines handled in order; False when
        there was nothing to read (an empty pipe, or its end)."""
        try:
            chunk = os.read(side.r, _READ)
        except BlockingIOError:
            return False
        if not chunk:
            self._eof(side)
            return False
        self._take(side, chunk)
        return True

    def _drain(self, side: _Side) -> None:
        """What a side left in its pipe before its launch ended."""
        while side.r >= 0 and side.r in self.sel.get_map() and self._read(side):
            pass

    def _take(self, side: _Side, chunk: bytes) -> None:
        """A chunk of a side's stdout: its complete lines handled in order, each within the
        line cap; nothing kept once the side is no longer read (after a line over the cap)."""
        if not side.reading:
            return
        side.partial += chunk
        while side.reading:
            nl = side.partial.find(b"\n")
            if nl < 0:
                if len(side.partial) > side.line_cap:
                    self._over_cap(side)
                break
            line = bytes(side.partial[:nl])
            del side.partial[:nl + 1]
            if len(line) > side.line_cap:
                self._over_cap(side, line)
                break
            self._line(side, line)

    def _eof(self, side: _Side) -> None:
        """A side's stdout ended: nothing more comes from it. What it wrote after its last
        newline is no frame (docs/episodes.md): kept as raw text with the reason, never
        passed on, and an agent_error from the agent (the driver's fault from the driver
        before the end)."""
        self._unwatch(side.r)
        side.reading = False
        if not side.partial:
            return
        data = bytes(side.partial[:side.line_cap])
        side.partial.clear()
        self._record(side.name, "rig", raw=data, reason=UNTERMINATED)
        why = f"{side.name}'s output ended in the middle of a line (transcript line {self.seq - 1})"
        if side is self.driver:
            if self.state != "over":
                self._end("driver_fault", f"the {why}")
        elif self.state != "over":
            self._agent_breach(f"the {why}")
        elif self.out.termination in VERIFIER_DECIDES:
            self.out.termination, self.out.error = "agent_error", f"the {why}"

    def _over_cap(self, side: _Side, line: bytes | None = None) -> None:
        data = bytes(line if line is not None else side.partial)
        side.partial.clear()
        side.reading = False  # the rest of its output is not read into memory
        why = f"a line over {side.line_cap} bytes"
        self._record(side.name, "rig", raw=data[:side.line_cap], reason=why)
        if side is self.agent:
            self._agent_breach(f"the agent wrote {why} (max_output_bytes)")
        else:
            self._end("driver_fault", f"the driver wrote {why}")

    def _line(self, side: _Side, line: bytes) -> None:
        if side is self.agent:
            self._agent_line(line)
        else:
            self._driver_line(line)

    # -- the agent's lines -------------------------------------------------------------------

    def _agent_line(self, line: bytes) -> None:
        if self.state == "over":
            if not self.after_end_seen:
                self.after_end_seen = True
                self._keep("agent", line, AFTER_END)
                if self.out.termination in VERIFIER_DECIDES:
                    self.out.termination = "agent_error"
                    self.out.error = f"the agent wrote after end (transcript line {self.seq - 1})"
            return
        if self.state != "agent":
            self._keep("agent", line, "not the agent's turn")
            self._agent_breach(f"the agent wrote when it was not its turn (transcript line {self.seq - 1})")
            return
        try:
            frame = agent_frame(line, self.max_output)
        except BadFrame as e:
            self._keep("agent", line, str(e))
            self._agent_breach(f"the agent wrote a line that is not a valid frame: {e} "
                               f"(transcript line {self.seq - 1})")
            return
        doc = orjson.loads(line)
        self._record("agent", "rig", frame=doc, with_prefix=True)
        self.history.append(doc["message"])
        self.out.turns += 1
        if frame.usage is not None:
            for key in ("cost_usd", "input_tokens", "output_tokens"):
                v = getattr(frame.usage, key)
                if v is not None:
                    self.reported[key] = True
                    if key == "cost_usd":
                        self.cost += v
                    else:
                        self.tokens[key] += v
        if self.out.turns >= self.ep.max_turns:
            self._end("max_turns", None)
        elif self.ep.max_cost_usd is not None and (
                self.metered_cost() if self.metered_cost is not None else self.cost) >= self.ep.max_cost_usd:
            self._end("budget", None)
        else:
            self.calls = [c.id for c in frame.message.tool_calls or []]
            relayed = {"type": "message", "message": doc["message"]}
            self._record("rig", "driver", frame=relayed)
            self._send(self.driver, relayed)
            self.state, self.wait_until = "driver", time.monotonic() + self.ep.driver_timeout_s

    def _agent_breach(self, why: str) -> None:
        self._end("agent_error", why)

    # -- the driver's lines ------------------------------------------------------------------

    def _driver_line(self, line: bytes) -> None:
        if self.state == "over":
            self._keep("driver", line, "written after the end")
            return
        try:
            frame = driver_frame(line)
        except BadFrame as e:
            self._keep("driver", line, str(e))
            self._end("driver_fault", f"the driver wrote a line that is not a valid frame: {e} "
                      f"(transcript line {self.seq - 1})")
            return
        doc = orjson.loads(line)
        if self.state == "session":
            if not isinstance(frame, SessionFrame):
                self._keep("driver", line, "expected session")
                self._end("driver_fault", f"the driver's first frame was {frame.type!r}, not session")
                return
            self._record("driver", "rig", frame=doc)
            messages = doc.get("messages", [])
            self._deliver({"type": "session", "tools": doc.get("tools", []), "messages": messages})
            return
        if self.state != "driver":
            self._keep("driver", line, "not the driver's turn")
            self._end("driver_fault", "the driver wrote when it was not asked "
                      f"(transcript line {self.seq - 1})")
            return
        if isinstance(frame, DriverEndFrame):
            self._record("driver", "rig", frame=doc)
            self._end("driver_end", None)
            return
        if not isinstance(frame, ReplyFrame):
            self._keep("driver", line, "expected reply or end")
            self._end("driver_fault", f"the driver answered with {frame.type!r}, not reply or end")
            return
        problem = tool_reply_problem(self.calls, frame.messages)
        if problem is None and not frame.messages:
            problem = "an empty reply"
        if problem is not None:
            self._keep("driver", line, problem)
            self._end("driver_fault", f"the driver answered wrongly: {problem} "
                      f"(transcript line {self.seq - 1})")
            return
        self._record("driver", "rig", frame=doc)
        self.tool_errors += tool_errors(frame.messages)
        if self.tool_errors >= self.ep.max_tool_errors:
            self._end("max_tool_errors", None)
            return
        self._deliver({"type": "turn", "messages": doc["messages"]})

    def _deliver(self, frame: dict[str, Any]) -> None:
        self.out.agent_fed = True  # from here on no fault of the episode starts it again
        self._record("rig", "agent", frame=frame, with_prefix=True)
        self.history.extend(frame["messages"])
        self._send(self.agent, frame)
        self.state, self.wait_until = "agent", time.monotonic() + self.ep.turn_timeout_s

    # -- the end -----------------------------------------------------------------------------

    def _end(self, termination: str, why: str | None) -> None:
        if self.state == "over":
            return
        self.state, self.wait_until = "over", None
        self.out.termination, self.out.error = termination, why
        if termination == "driver_fault":
            self.out.error = self._with_stderr(why or "driver fault")
        now = time.monotonic()
        if not self.agent.ended:
            frame = {"type": "end", "termination": termination}
            self._record("rig", "agent", frame=frame)
            self._send(self.agent, frame, close=True)
            self.grace_until = now + GRACE_S
        if not self.driver.ended:
            frame = {"type": "finish", "termination": termination}
            self._record("rig", "driver", frame=frame)
            self._send(self.driver, frame, close=True)
            self.finish_until = now + self.ep.driver_timeout_s

    def _fault_after(self, why: str) -> None:
        if self.out.termination != "driver_fault":
            self.out.termination = "driver_fault"
            self.out.error = self._with_stderr(why)

    def _with_stderr(self, why: str) -> str:
        try:
            with open(self.driver_stderr, "rb") as f:
                f.seek(max(os.fstat(f.fileno()).st_size - STDERR_TAIL, 0))
                tail = f.read().decode(errors="replace").strip()
        except OSError:
            tail = ""
        return f"{why}; the driver's stderr ends: {tail}" if tail else f"{why}; the driver wrote nothing on stderr"

    def _done(self, side: _Side) -> None:
        self._unwatch(side.done_r)
        side.thread.join()
        self._drain(side)
        side.ended = True
        if side.pending:
            side.pending.clear()
        self._watch_write(side)
        if side.failure is not None:
            self.out.infra_error = f"the rig failed running the {side.name}: {side.failure!r}"
            self._end("driver_fault" if side is self.driver else "agent_error", self.out.infra_error)
            return
        fin = side.finished
        assert fin is not None
        if fin.interrupted or (self.cancel is not None and self.cancel.is_set()):
            self.out.interrupted = True
            self._end("agent_error" if side is self.agent else "driver_fault", "the rig stopped")
            return
        if side is self.agent:
            self._agent_ended(fin)
        else:
            self._driver_ended(fin)

    def _agent_ended(self, fin: sandbox.Finished) -> None:
        if self.state == "over":
            return
        if fin.error:
            if fin.error_kind == "infra":
                self.out.infra_error = f"the sandbox could not run the agent: {fin.error}"
                self._end("agent_error", self.out.infra_error)
            else:
                self._end("agent_error", f"the agent could not start: {fin.error}")
        elif fin.timed_out:
            self._end("agent_timeout", f"the task's timeout_s ({self.deadline_s:g} s) ran out")
        elif fin.killed_for:
            self._end("agent_error", f"killed: {fin.killed_for}")
        elif fin.signal:
            self._end("agent_error", f"the agent was killed by signal {fin.signal}")
        elif fin.exit_code != 0:
            self._end("agent_error", f"the agent exited {fin.exit_code}")
        else:
            self._end("agent_exit", None)

    def _driver_ended(self, fin: sandbox.Finished) -> None:
        if fin.error:
            why = f"the driver could not start: {fin.error}"
        elif fin.killed_for == "stopped":
            return  # _limits recorded why it was stopped
        elif fin.timed_out:
            why = "the driver ran past the task's timeout"
        elif fin.signal:
            why = f"the driver was killed by signal {fin.signal}"
        elif fin.exit_code != 0:
            why = f"the driver exited {fin.exit_code}"
        elif self.state != "over":
            why = "the driver exited before the end"
        else:
            self.finish_until = None
            return
        if self.state == "over":
            self._fault_after(why)
        else:
            self._end("driver_fault", why)
        self.finish_until = None

    # -- the transcript ----------------------------------------------------------------------

    def _keep(self, who: str, line: bytes, reason: str) -> None:
        """A line that was not relayed: its frame when it is a JSON object, else its text."""
        try:
            doc = parse_object(line)
        except BadFrame:
            self._record(who, "rig", raw=line, reason=reason)
            return
        with_prefix = who == "agent" and isinstance(doc.get("message"), dict)
        self._record(who, "rig", frame=doc, reason=reason, with_prefix=with_prefix)
        if with_prefix:
            self.history.append(doc["message"])

    def _record(self, src: str, dst: str, *, frame: dict[str, Any] | None = None,
                raw: bytes | None = None, reason: str | None = None, with_prefix: bool = False) -> None:
        rec: dict[str, Any] = {"seq": self.seq, "from": src, "to": dst,
                               "t_ms": round((time.monotonic() - self.t0) * 1000, 3)}
        if frame is not None:
            rec["frame"] = frame
        if raw is not None:
            rec["raw"] = raw.decode("utf-8", errors="replace")
        if reason is not None:
            rec["reason"] = reason
        if with_prefix:
            rec["prefix"] = prefix(self.history)
        if self.secrets:
            rec = _redacted(rec, self.secrets)
        self.journal.write(self.path.name, [rec])
        self.seq += 1

    def _usage(self) -> None:
        self.out.usage = {
            "cost_usd": self.cost if self.reported["cost_usd"] else None,
            "input_tokens": self.tokens["input_tokens"] if self.reported["input_tokens"] else None,
            "output_tokens": self.tokens["output_tokens"] if self.reported["output_tokens"] else None,
        }


def _redacted(value: Any, secrets: Mapping[str, str]) -> Any:
    """Every string with a secret's value replaced by `[REDACTED:NAME]` (streams.Redactor's mark)."""
    if isinstance(value, str):
        for name, secret in secrets.items():
            if secret in value:
                value = value.replace(secret, f"[REDACTED:{name}]")
        return value
    if isinstance(value, dict):
        return {k: _redacted(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, secrets) for v in value]
    return value


def keep_driver_out(src: Path, dst: Path, cap: int, secrets: Mapping[str, str] | None = None) -> list[str]:
    """The driver's EVALRIG_DRIVER_OUT files into the evidence's driver/ (regular files and
    folders; links and others left out), every secret value redacted as in the agent's
    files; returns what was left out and why."""
    values = {name: value.encode() for name, value in (secrets or {}).items() if value}
    left: list[str] = []
    total = 0
    todo = [(src, dst)]
    dst.mkdir(exist_ok=True)
    while todo:
        s, d = todo.pop()
        with os.scandir(s) as it:
            for e in sorted(it, key=lambda e: e.name):
                st = e.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    (d / e.name).mkdir()
                    todo.append((Path(e.path), d / e.name))
                elif stat.S_ISREG(st.st_mode) and total + st.st_size <= cap:
                    if values:
                        r = Redactor(values)
                        with open(e.path, "rb") as fi, open(d / e.name, "wb") as fo:
                            while chunk := fi.read(1 << 16):
                                fo.write(r.feed(chunk))
                            fo.write(r.flush())
                    else:
                        shutil.copyfile(e.path, d / e.name, follow_symlinks=False)
                    total += st.st_size
                else:
                    left.append(f"driver/{Path(e.path).relative_to(src)}")
    return left


def canary_in(evidence_dir: Path, needles: list[bytes]) -> list[str]:
    """Where the transcript and the driver's files hold the canary (the agent could have
    said it to the driver, which may write it anywhere)."""
    where = []
    paths = [evidence_dir / TRANSCRIPT]
    ddir = evidence_dir / DRIVER_DIR
    if ddir.is_dir():
        paths += sorted(p for p in ddir.rglob("*") if p.is_file() and not p.is_symlink())
    for p in paths:
        try:
            data = p.read_bytes()
        except OSError:
            continue
        if scan(data, needles):
            where.append(str(p.relative_to(evidence_dir)))
    return where


def read_transcript(evidence_dir: Path) -> list[dict[str, Any]] | None:
    """The transcript's lines as dicts (a line that is not a JSON object skipped); None when
    the evidence has no transcript."""
    try:
        data = (evidence_dir / TRANSCRIPT).read_bytes()
    except OSError:
        return None
    out = []
    for raw in data.splitlines():
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def last_answer(evidence_dir: Path) -> str | None:
    """What a non-command verifier judges in an episode: the content of the last assistant
    message the agent sent (relayed or not), from the transcript; None when there is none."""
    answer = None
    for rec in read_transcript(evidence_dir) or []:
        frame = rec.get("frame")
        if (rec.get("from") == "agent" and "reason" not in rec and isinstance(frame, dict)
                and frame.get("type") == "message"):
            msg = frame.get("message")
            if isinstance(msg, dict) and msg.get("role") == "assistant":
                content = msg.get("content")
                answer = content if isinstance(content, str) else answer
    return answer
