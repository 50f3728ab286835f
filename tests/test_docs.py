"""The docs stay true to the tree: every relative link of the README, BENCHMARKS.md and
docs/*.md reaches an existing file (and, with ``#anchor``, one of its headings), and
docs/cli.md has a section for every ``poetc`` command that lists each of its options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from poet_compiler.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"(?ms)^```.*?^```")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped,
    spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {slug(h) for h in re.findall(r"(?m)^#{1,6} (.+)$", text)}


def relative_links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in relative_links(doc):
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_slug_follows_github() -> None:
    assert slug("0. Work, not the clock (`poet_compiler/work.py`, `solve/clock.py`)") \
        == "0-work-not-the-clock-poet_compilerworkpy-solveclockpy"
    assert slug("`poetc emit-c`") == "poetc-emit-c"
    assert slug("The runtime's reserve") == "the-runtimes-reserve"


COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]


def cli_sections() -> dict[str, str]:
    parts = re.split(r"(?m)^## `poetc ([a-z-]+)`$", (ROOT / "docs" / "cli.md").read_text())
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_cli_md_has_a_section_per_command_and_no_other() -> None:
    assert set(cli_sections()) == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_md_lists_every_option(command: str) -> None:
    section = cli_sections().get(command, "")
    options = [opt for param in COMMANDS[command].params if param.param_type_name == "option"
               for opt in (*param.opts, *param.secondary_opts) if opt != "--help"]
    missing = [opt for opt in options if not re.search(rf"`{re.escape(opt)}`", section)]
    assert not missing, f"docs/cli.md, `poetc {command}`: {missing} not listed"
