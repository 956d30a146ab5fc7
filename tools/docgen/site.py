"""The mkdocs-gen-files script (mkdocs.yml ``gen-files: scripts``): the pages the site builds from the source
tree or data instead of a committed file. The API reference (tools/docgen/reference.py) and the benchmarks
summary with its charts first (tools/docgen/benchmarks.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files
from mkdocs.structure.files import InclusionLevel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.docgen import benchmarks, reference

for uri, text in reference.pages().items():
    with mkdocs_gen_files.open(f"reference/{uri}", "w") as page:
        page.write(text)

# The section's nav (mkdocs-literate-nav reads it), not a page of its own.
mkdocs_gen_files.FilesEditor.current().files.get_file_from_path(
    "reference/SUMMARY.md"
).inclusion = InclusionLevel.EXCLUDED

with mkdocs_gen_files.open("benchmarks/index.md", "r") as summary:
    text = summary.read()
with mkdocs_gen_files.open("benchmarks/index.md", "w") as summary:
    summary.write(benchmarks.on_site(text))
