"""The mkdocs-gen-files script (mkdocs.yml ``gen-files: scripts``): the pages the site builds from the source
tree or data instead of a committed file. The API reference (tools/docgen/reference.py), one changelog page per
package of the package list (each package's CHANGELOG.md, under ``changelog/``, with its navigation), and the
benchmarks summary with its charts (tools/docgen/benchmarks.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files
from mkdocs.structure.files import InclusionLevel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.docgen import benchmarks, reference
from tools.packages import packages

for uri, text in reference.pages().items():
    with mkdocs_gen_files.open(f"reference/{uri}", "w") as page:
        page.write(text)

# The section's nav (mkdocs-literate-nav reads it), not a page of its own.
mkdocs_gen_files.FilesEditor.current().files.get_file_from_path(
    "reference/SUMMARY.md"
).inclusion = InclusionLevel.EXCLUDED

changelogs = []
for pkg in packages().values():
    if not getattr(pkg, "published", True):
        continue
    entries = pkg.changelog.read_text(encoding="utf-8").split("\n", 1)[1]  # below the file's own title
    with mkdocs_gen_files.open(f"changelog/{pkg.dist}.md", "w") as page:
        page.write(f"# {pkg.dist} changelog\n{entries}")
    changelogs.append(f"* [{pkg.dist}]({pkg.dist}.md)")
with mkdocs_gen_files.open("changelog/SUMMARY.md", "w") as nav:
    nav.write("\n".join(changelogs) + "\n")
mkdocs_gen_files.FilesEditor.current().files.get_file_from_path(
    "changelog/SUMMARY.md"
).inclusion = InclusionLevel.EXCLUDED

with mkdocs_gen_files.open("benchmarks/index.md", "r") as summary:
    text = summary.read()
with mkdocs_gen_files.open("benchmarks/index.md", "w") as summary:
    summary.write(benchmarks.on_site(text))
