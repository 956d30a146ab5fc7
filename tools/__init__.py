"""Repository tooling: version bumps, changelog checks, lowest-version constraints, dist checks, matrix tables.

Nothing here is published; every module runs with the standard library plus ``packaging``.
"""
