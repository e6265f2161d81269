"""The repository is self-contained: code, tests and docs cite only documents a clone contains.

Checks over `src/strom`, `docs/`, `tests/`, `bench/`, `examples/` and README.md:

* no mention of the working notes the project was started from, which live outside the repository
  (the names are assembled below, so that this file does not mention them itself);
* every link of the form ``docs/<page>.md#<anchor>`` (or ``<page>.md#<anchor>`` inside docs/) names a
  page that exists and a heading of that page, anchored the way GitHub renders headings;
* every file in `bench/` is described in docs/benchmarks.md.
"""

from __future__ import annotations

import re
from pathlib import Path

from strom.protocol.api import SUPPORTED, flexible

ROOT = Path(__file__).resolve().parents[2]
SCANNED = [ROOT / "src" / "strom", ROOT / "docs", ROOT / "tests", ROOT / "bench", ROOT / "examples"]
SUFFIXES = {".py", ".md", ".txt", ".toml", ".cfg", ".sh", ".c", ".json", ".yaml", ".yml", ".html", ".css"}

OUTSIDE_DOCUMENTS = [
    "DESIGN" + ".md",
    "STYLE" + ".md",
    *(f"{topic}-{'NOTES'}" for topic in ("PROTOCOL", "REPLICATION", "SECURITY", "TRANSACTIONS", "SPARK")),
    "shared" + " folder",
    "Shared" + " folder",
    "/work/" + "shared",
    "seeds" + "/00",
    "seeds" + "'",
]


def scanned_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "Makefile"]
    for top in SCANNED:
        files += [p for p in top.rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    return [p for p in files if p.exists()]


def test_no_file_cites_a_document_outside_the_repository() -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {name}"
        for path in scanned_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for name in OUTSIDE_DOCUMENTS
        if name in line
    ]
    assert hits == []


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#{1,6} (.+)", line)):
            base = github_anchor(m.group(1))
            anchor, n = base, 0
            while anchor in found:  # GitHub numbers repeated headings
                n += 1
                anchor = f"{base}-{n}"
            found.add(anchor)
    return found


LINK = re.compile(r"(?<![\w/.-])((?:docs/)?[a-z][\w-]*\.md)#([\w-]+)")


def test_github_anchor_follows_github() -> None:
    assert github_anchor("Produce request layout (v3-v8)") == "produce-request-layout-v3-v8"
    assert github_anchor("`strom topics reassign`: move replicas") == "strom-topics-reassign-move-replicas"


def test_every_docs_link_names_an_existing_heading() -> None:
    docs = ROOT / "docs"
    known = {page.name: anchors(page) for page in docs.glob("*.md")}
    broken = []
    for path in scanned_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for target, anchor in LINK.findall(line):
                page = Path(target).name
                if not target.startswith("docs/") and path.parent != docs:
                    continue  # a bare page name outside docs/ is not a docs link
                if page not in known or anchor not in known[page]:
                    broken.append(f"{path.relative_to(ROOT)}:{number}: {target}#{anchor}")
            if path.parent == docs:
                for anchor in re.findall(r"\]\(#([\w-]+)\)", line):
                    if anchor not in known[path.name]:
                        broken.append(f"{path.relative_to(ROOT)}:{number}: #{anchor}")
    assert broken == []


def test_every_benchmark_is_described_in_the_benchmarks_page() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    scripts = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "bench").iterdir() if p.is_file())
    assert [name for name in scripts if name not in page] == []


def test_the_protocol_page_lists_exactly_the_advertised_versions() -> None:
    text = (ROOT / "docs" / "protocol.md").read_text()
    section = text.split("### The table\n", 1)[1].split("\n#", 1)[0]
    rows = re.findall(
        r"^\| \w+ \| (\d+) \| (\d+)\.\.(\d+) \| (\d+|none) \| `[\w/.]+` \|$", section, re.MULTILINE
    )
    documented = {int(key): (int(lo), int(hi), flex) for key, lo, hi, flex in rows}
    expected: dict[int, tuple[int, int, str]] = {}
    for key, (lo, hi) in SUPPORTED.items():
        flex = [v for v in range(lo, hi + 1) if flexible(key, v)]
        expected[int(key)] = (lo, hi, str(flex[0]) if flex else "none")
    assert documented == expected
