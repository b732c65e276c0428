"""The `tunescope` command line (Typer)."""

from __future__ import annotations

import sys

from tunescope.errors import TunescopeError

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the CLI and turns tunescope errors into one line and exit code 2."""
    from tunescope.cli._app import app

    try:
        app(args=argv, prog_name="tunescope", standalone_mode=True)
    except TunescopeError as exc:
        from tunescope.cli._format import printable

        print(f"tunescope: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())


def console() -> None:
    """Console-script entry point."""
    sys.exit(main())
