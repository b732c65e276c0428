"""The `tunescope` command line (Typer)."""

from __future__ import annotations

import sys
from typing import Any

from tunescope.errors import TunescopeError

__all__ = ["main"]

INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), as a shell reports it."""


def main(argv: list[str] | None = None) -> int:
    """Entry point. Bad input of any kind (tunescope's errors and Click's usage errors: an
    unknown option, a missing argument, a value of the wrong type) leaves as one line on
    stderr, ``tunescope: error: ...``, and exit code 2; Ctrl-C as exit code 130."""
    try:
        import typer
        import typer.main

        from tunescope.cli._app import app
        from tunescope.cli._completion import answering
        from tunescope.cli._input import CLICK_ERROR, USAGE_ERROR

        args = sys.argv[1:] if argv is None else list(argv)
        if not args and not answering():  # Click would print the help (exit code 2): one line
            names = ", ".join(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
            return _error(f"missing command: use one of {names} (see tunescope --help)")
        try:
            code = app(args=args, prog_name="tunescope", standalone_mode=False)
        except TunescopeError as exc:
            return _error(str(exc))
        except USAGE_ERROR as exc:
            return _error(_usage_message(exc))
        except CLICK_ERROR as exc:
            return _error(_click_message(exc))
        except typer.Abort:  # Click's Abort: Ctrl-C or the end of input at a prompt
            return INTERRUPTED
    except KeyboardInterrupt:
        return INTERRUPTED
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return code if isinstance(code, int) else 0


def _error(message: str) -> int:
    from tunescope.cli._format import printable

    print(f"tunescope: error: {printable(message)}", file=sys.stderr)
    return 2


def _click_message(exc: Any) -> str:
    """Click's message on one line, starting lower-case like ours, without the final dot."""
    lines = [x.strip() for x in str(exc.format_message()).splitlines() if x.strip()]
    text = " ".join(lines).removesuffix(".")
    if text[:1].isupper() and text[1:2].islower():
        text = text[0].lower() + text[1:]
    return text


def _usage_message(exc: Any) -> str:
    """A usage error, with the command whose --help explains it."""
    ctx = exc.ctx
    text = _click_message(exc)
    return text if ctx is None else f"{text} (see {ctx.command_path} --help)"


if __name__ == "__main__":
    sys.exit(main())


def console() -> None:
    """Console-script entry point."""
    sys.exit(main())
