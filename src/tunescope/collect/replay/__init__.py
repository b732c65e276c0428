"""Builtin GPU replay fixtures (data files) and the script that synthesizes them.

The ``*.json`` files here are SYNTHESIZED, not recorded: see ``README.md`` and
``_make_fixtures.py``.
"""
