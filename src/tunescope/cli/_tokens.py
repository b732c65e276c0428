"""`tunescope token`: the access tokens of a team server, managed on its database.

A token is printed once, as the last line of `token create`'s output (so that scripts can take
it with `tail -n 1`); the database keeps only its digest. Tokens are made on the database
itself (a `postgresql://` or SQLite URL), never through a server.
"""

from __future__ import annotations

import math
import time
from typing import Annotated

import typer

from tunescope.cli import _format as fmt
from tunescope.cli._input import Command, StoreOpt, not_empty
from tunescope.errors import ConfigError
from tunescope.store import SQLStore, open_store, resolve_url

__all__ = ["admin_store", "tokens"]

tokens = typer.Typer(
    name="token",
    help="Make, list and revoke the access tokens of a team server (tunescope serve).",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

ProjectOpt = Annotated[
    str,
    typer.Option("--project", help="The project the token is for.", callback=not_empty),
]


def admin_store(
    store: str | None, create: bool = False, who: str = "tokens and team servers work"
) -> SQLStore:
    """The database (not a server) the tokens live in: a team server's store; with
    ``create``, its tables are made in an empty database (a new SQLite file). ``who``: what
    the refusal of a server's URL names."""
    if resolve_url(store).partition("://")[0] in ("http", "https"):
        raise ConfigError(
            f"{who} on the team server's database: give its "
            "postgresql:// URL (or a SQLite file), not the URL of a tunescope server"
        )
    st = open_store(store, create=create)
    if not isinstance(st, SQLStore):
        st.close()
        raise ConfigError(f"{st.url} keeps no tokens")
    return st


@tokens.command("create", cls=Command)
def create(
    project: ProjectOpt,
    scope: Annotated[
        str, typer.Option("--scope", help="read (view the project) or write (record into it).")
    ],
    name: Annotated[
        str | None,
        typer.Option("--name", help="A name to know it by (default token-N).", callback=not_empty),
    ] = None,
    expires: Annotated[
        float | None,
        typer.Option("--expires", help="Days until it stops working (default: until revoked)."),
    ] = None,
    store: StoreOpt = None,
) -> None:
    """Make a token for one project and print it once, as the last line.

    On an empty database it first makes the store's tables (a new team server starts so).

    Keep it secret: whoever has it reads (or, with write, records into) the project. Give it
    to clients in $TUNESCOPE_TOKEN, never on a command line."""
    if scope not in ("read", "write"):
        raise ConfigError(f"--scope must be read or write, not {scope!r}")
    if expires is not None and not (math.isfinite(expires) and 0 < expires <= 36500):
        raise ConfigError(f"--expires {expires} must be a number of days, above 0")
    with admin_store(store, create=True) as st:  # the first step of a new team server
        until = None if expires is None else time.time() + expires * 86400
        info, secret = st.create_token(project, scope, name, until)
    typer.echo(
        f"token {fmt.printable(info.name)} (id {info.id}) for project "
        f"{fmt.printable(info.project)}, scope {info.scope}, "
        f"{'expires ' + fmt.when(info.expires) if info.expires else 'until revoked'}; "
        "it is shown this once:",
        err=True,
    )
    typer.echo(secret)


@tokens.command("list", cls=Command)
def list_(
    project: Annotated[
        str | None,
        typer.Option("--project", help="Only this project's tokens.", callback=not_empty),
    ] = None,
    store: StoreOpt = None,
) -> None:
    """List tokens: id, project, name, scope, made, expires, last used, revoked (never the
    secrets, which are not kept)."""
    with admin_store(store) as st:
        rows = [
            [
                str(t.id),
                t.project,
                t.name,
                t.scope,
                fmt.when(t.created),
                fmt.when(t.expires) if t.expires else "-",
                fmt.when(t.used) if t.used else "-",
                fmt.when(t.revoked) if t.revoked else "-",
            ]
            for t in st.list_tokens(project)
        ]
    if not rows:
        typer.echo("no tokens")
        return
    typer.echo(
        fmt.table(["id", "project", "name", "scope", "made", "expires", "used", "revoked"], rows)
    )


@tokens.command("revoke", cls=Command)
def revoke(
    token: Annotated[
        str, typer.Argument(metavar="TOKEN", help="The token's id, or its name with --project.")
    ],
    project: Annotated[
        str | None,
        typer.Option("--project", help="The project of a token given by name.", callback=not_empty),
    ] = None,
    store: StoreOpt = None,
) -> None:
    """Revoke a token: from now on it is refused, like an unknown one."""
    ref: int | str = int(token) if token.isdecimal() and project is None else token
    with admin_store(store) as st:
        info = st.revoke_token(ref, project)
    typer.echo(
        f"token {fmt.printable(info.name)} (id {info.id}) of project "
        f"{fmt.printable(info.project)} is revoked"
    )
