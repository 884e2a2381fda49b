"""`juggler run MODEL`: chat with a model in the terminal, as `ollama run` does.

The answer streams as it is generated; the conversation is one session on the server
(each turn prefills only itself). Lines starting with \"\"\" open a multi-line message;
readline gives line editing and a history kept in the config directory.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from juggler.cli.chat import OPTIONS, ChatSession, parse_option, read_message
from juggler.cli.client import ServerError
from juggler.cli.common import HostOpt, PortOpt, app, call_with_spinner, connect, err
from juggler.config import juggler_home

HELP = """Commands:
  /set NAME VALUE   set a sampling option ({options})
  /set system TEXT  set the system message (starts a new conversation)
  /set verbose      show tokens/s and cached tokens after each answer (/set quiet: don't)
  /show             show the options set
  /clear            forget the conversation (a new session)
  /bye              leave (also Ctrl-D)
  /?, /help         this help
Start a message with \"\"\" to write several lines; end it with \"\"\".
Ctrl-C stops an answer."""


def _history_file() -> Path:
    return juggler_home() / "run_history"


def _start_history() -> Any:
    """Line editing and history when we talk to a terminal (readline); None otherwise."""
    if not sys.stdin.isatty():
        return None
    try:
        import readline
    except ImportError:
        return None
    readline.set_history_length(1000)
    with contextlib.suppress(OSError):
        readline.read_history_file(_history_file())
    return readline


def _save_history(readline: Any) -> None:
    if readline is None:
        return
    with contextlib.suppress(OSError):
        _history_file().parent.mkdir(parents=True, exist_ok=True)
        readline.write_history_file(_history_file())


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


class Repl:
    def __init__(self, chat: ChatSession, verbose: bool) -> None:
        self.chat = chat
        self.verbose = verbose
        self.options: dict[str, Any] = {}

    def command(self, line: str) -> bool:
        """Carry out a /command; False when it is time to leave."""
        name, _, rest = line[1:].strip().partition(" ")
        rest = rest.strip()
        if name in ("bye", "exit", "quit"):
            return False
        if name in ("?", "help"):
            _write(HELP.format(options=", ".join(OPTIONS)) + "\n")
        elif name == "clear":
            self.chat.clear()
            _write("Cleared the conversation (new session).\n")
        elif name == "show":
            shown = ", ".join(f"{k}={v}" for k, v in self.options.items()) or "(defaults)"
            _write(f"model {self.chat.model}; options: {shown}; system: {self.chat.system!r}\n")
        elif name == "set":
            self.set(rest)
        else:
            _write(f"Unknown command '/{name}'. Type /? for help.\n")
        return True

    def set(self, rest: str) -> None:
        key, _, value = rest.partition(" ")
        if key in ("verbose", "quiet"):
            self.verbose = key == "verbose"
            _write(f"Set '{key}' mode.\n")
        elif key == "system":
            self.chat.system = value.strip() or None
            self.chat.clear()
            _write("Set the system message (new session).\n")
        elif not key:
            _write(f"Usage: /set NAME VALUE; options: {', '.join(OPTIONS)}\n")
        else:
            try:
                self.options[key] = parse_option(key, value)
            except ValueError as exc:
                _write(f"error: {exc}\n")
                return
            _write(f"Set parameter '{key}' to '{value.strip()}'\n")

    def ask(self, text: str) -> None:
        try:
            answer = self.chat.ask(text, self.options, _write)
        except KeyboardInterrupt:
            _write("\n^C (stopped)\n")
            return
        _write("\n" if answer.text.endswith("\n") else "\n\n")
        if self.verbose:
            usage = answer.usage
            tps = answer.tokens_per_s()
            first = answer.first_text_s
            err.print(
                f"[dim]{usage.get('completion_tokens', 0)} tokens · "
                f"{f'{tps:.1f}' if tps else '-'} tokens/s · "
                f"first token {f'{first * 1000:.0f} ms' if first else '-'} · "
                f"cached {usage.get('prompt_tokens_reused', 0)} of "
                f"{usage.get('prompt_tokens', 0)} prompt tokens · "
                f"finish {answer.finish_reason}[/dim]",
                highlight=False,
                soft_wrap=True,
            )

    def loop(self) -> None:
        while True:
            try:
                text = read_message(input)
            except EOFError:
                _write("\n")
                return
            except KeyboardInterrupt:
                _write("\nUse /bye or Ctrl-D to leave.\n")
                continue
            if not text.strip():
                continue
            try:
                if text.startswith("/"):
                    if not self.command(text):
                        return
                else:
                    self.ask(text)
            except ServerError as exc:
                _write(f"error ({exc.status}): {exc.message}\n")
            except httpx.TransportError as exc:
                _write(f"error: the server did not answer ({type(exc).__name__})\n")


@app.command()
def run(
    model: str,
    system: Annotated[str | None, typer.Option(help="A system message.")] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Show tokens/s and cached tokens.")
    ] = False,
    host: HostOpt = None,
    port: PortOpt = None,
) -> None:
    """Chat with a model in the terminal (streams; one session per conversation)."""
    # Ctrl-C stops an answer even when started from a shell that ignores SIGINT for what
    # it runs in the background (Python leaves an inherited "ignore" as it is).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    chat = ChatSession(connect(host, port), model, system)
    call_with_spinner(f"loading {model} ...", chat.open)
    readline = _start_history()
    _write('Type /? for help, /bye to leave; """ starts a message of several lines.\n')
    try:
        Repl(chat, verbose).loop()
    finally:
        _save_history(readline)
        with contextlib.suppress(ServerError, httpx.HTTPError):
            chat.close()
