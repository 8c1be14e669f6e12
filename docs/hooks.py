"""MkDocs hooks: pages link to the repository's figures (``../figures/x.png`` from a page
in docs/, as GitHub shows them); the site carries those files under ``_repo/`` and the
links are rewritten to them, so that the strict build still checks every link."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
SHARED = ("figures", "profiles")
"""Repository folders whose files pages may link to."""
_LINK = re.compile(r"\]\(((?:\.\./)+)(" + "|".join(SHARED) + r")/")


def on_files(files: Files, config: Any) -> Files:
    for folder in SHARED:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in (".png", ".pdf", ".svg", ".csv", ".yaml"):
                uri = f"_repo/{path.relative_to(ROOT).as_posix()}"
                files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    depth = page.file.src_uri.count("/")

    def rewrite(match: re.Match[str]) -> str:
        ups, folder = match.group(1), match.group(2)
        if ups.count("../") != depth + 1:  # not a link to the repository root
            return match.group(0)
        return f"]({'../' * depth}_repo/{folder}/"

    return _LINK.sub(rewrite, markdown)
