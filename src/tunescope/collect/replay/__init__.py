"""Builtin GPU replay fixtures (data files).

The ``*.json`` files here are SYNTHESIZED, not recorded: see ``README.md``. The repository's
``bench/make_replay_fixtures.py`` generates them (it does not ship in the package).
"""
