"""Repository tooling, run by the nox sessions: the package list, the version matrix and its table, CI planning,
dist checks, environment reports and the docs hooks.

Nothing here is published. Versions, changelogs and lowest versions come from libraries (hatch, towncrier, uv),
called by the sessions in noxfile.py.
"""
