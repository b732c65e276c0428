"""Hatch build hook: no sdist or wheel of tunescope without its web page.

The page (src/tunescope/server/static) is built by `make web` with Node and is git-ignored;
pyproject.toml lists it as an artifact of both targets. A build that runs before `make web`
would otherwise ship a package whose `tunescope ui` serves only a "not built" note, so the
build stops here instead, saying what to run. This hook runs for every way of building
(`make dist`, `python -m build`, `pip install .`, `pip wheel`), which a check in the Makefile
would not. Editable installs (`make setup` installs one before the page is built) serve the
page from the working tree and are let through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

STATIC = Path("src", "tunescope", "server", "static")
PAGE_FILES = ("index.html", "app.js", "app.css", "api-docs/index.html")


class PageHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name == "wheel" and version == "editable":
            return
        static = Path(self.root) / STATIC
        missing = [name for name in PAGE_FILES if not (static / name).is_file()]
        if missing:
            raise RuntimeError(
                f"tunescope: the web page is not built ({STATIC.as_posix()}/ lacks "
                f"{', '.join(missing)}): run `make web` (needs Node 20), or `make dist`, "
                f"before building the {self.target_name}"
            )
