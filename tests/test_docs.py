"""The README and docs/: links resolve, every CLI option is documented, and the README stays a front page.

Fast: reads markdown files and walks the click group; no server, no model, no torch.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import click
import pytest

from lexi.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
OPTIONS_PAGE = ROOT / "docs" / "server.md"  # the one page that documents every option of every command
MAX_README_LINES = 250
FIRST_REQUEST_BEFORE = 60  # the first request must start within the README's first screen

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"\[(?:[^\]\\]|\\.)*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def markdown_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lowercased, punctuation other than '-' and '_'
    dropped, spaces turned into '-'."""
    text = INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    text = text.strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path, text: str | None = None) -> set[str]:
    """Every heading's anchor in a markdown file, repeats numbered as GitHub numbers them (-1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(text if text is not None else path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link that is not to another site, outside code."""
    links = []
    for number, line in prose_lines(text):
        line = INLINE_CODE.sub("code", line)
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto: ...
                continue
            links.append((number, target))
    return links


def broken_links(path: Path, text: str | None = None) -> list[str]:
    """What is wrong with each relative link of the markdown file at `path` (its `text`, if given)."""
    if text is None:
        text = path.read_text(encoding="utf-8")
    problems = []
    for number, target in relative_links(text):
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if ROOT not in linked.parents:
            problems.append(f"{where} (outside the repository)")
        elif file_part and not linked.exists():
            problems.append(f"{where} (no such file)")
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked, text if linked == path else None)):
            problems.append(f"{where} (no heading #{anchor} in {linked.relative_to(ROOT)})")
    return problems


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def test_slugs_follow_github():
    assert slug("Within `max_tokens`") == "within-max_tokens"
    assert slug("The GPU check: `bench/device_check.sh`") == "the-gpu-check-benchdevice_checksh"
    assert slug("Browser clients (CORS)") == "browser-clients-cors"
    assert slug("Scaling out: `--replicas N`") == "scaling-out---replicas-n"


def test_the_link_check_can_fail():
    """A missing file, a missing heading and a path outside the repository are each caught; good links are not."""
    page = ROOT / "docs" / "page.md"  # not on disk: the check reads the text given
    text = (
        "# Page\n## Part two\n"
        "[ok](server.md) [ok](#part-two) [ok](../README.md) [ok](https://example.com/x.md) `[no](code.md)`\n"
        "[a](missing.md) [b](server.md#no-such-heading) [c](#no-part) [d](../../outside.md)\n"
        "```\n[e](in-a-code-block.md)\n```\n"
    )
    assert [problem.split(": ", 1)[1] for problem in broken_links(page, text)] == [
        "missing.md (no such file)",
        "server.md#no-such-heading (no heading #no-such-heading in docs/server.md)",
        "#no-part (no heading #no-part in docs/page.md)",
        "../../outside.md (outside the repository)",
    ]


def commands(group: click.Command, prefix: str = "lexi-engine"):
    """(command path, command) for the group and every command under it, recursively."""
    yield prefix, group
    if isinstance(group, click.Group):
        for name, command in sorted(group.commands.items()):
            yield from commands(command, f"{prefix} {name}")


def section(page: str, title: str) -> str | None:
    """The text under the heading that names `title` (in backticks), up to the next heading of its level."""
    lines = [line for _, line in prose_lines(page)]
    for i, line in enumerate(lines):
        match = HEADING.match(line)
        if match and f"`{title}`" in match.group(2):
            level = len(match.group(1))
            end = next(
                (j for j in range(i + 1, len(lines)) if (m := HEADING.match(lines[j])) and len(m.group(1)) <= level),
                len(lines),
            )
            return "\n".join(lines[i:end])
    return None


def mentions(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def undocumented_options() -> list[str]:
    page = OPTIONS_PAGE.read_text(encoding="utf-8")
    missing = []
    for path, command in commands(main):
        options = [o for p in command.params if isinstance(p, click.Option) for o in p.opts + p.secondary_opts]
        long_names = [o for o in options if o.startswith("--")]
        if command is main:
            text = page  # options of the group itself, if it ever has any, may sit anywhere on the page
        else:
            text = section(page, path)
            if text is None:
                missing.append(f"{path} (no section headed `{path}`)")
                continue
        missing += [f"{path} {o}" for o in long_names if not mentions(text, o)]
    return missing


def test_every_cli_option_is_documented():
    assert undocumented_options() == [], f"document these in {OPTIONS_PAGE.relative_to(ROOT)}"


def test_the_option_check_can_fail():
    assert mentions("`--spec-max K`", "--spec-max")
    assert not mentions("`--spec-max K`", "--spec")  # a longer option does not stand in for a shorter one
    page = "# x\n## `lexi-engine serve`\n--port\n### More\n--host\n## `lexi-engine models`\n--json\n"
    assert section(page, "lexi-engine serve") == "## `lexi-engine serve`\n--port\n### More\n--host"
    assert section("# x\n", "lexi-engine generate") is None


def test_readme_is_a_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; the manual belongs in docs/"
    first_request = None
    for i, line in enumerate(lines):
        if line.strip() == "```bash":
            block = lines[i + 1 : next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))]
            if any("curl" in b for b in block):
                first_request = i + 1
                break
    assert first_request is not None, "README.md shows no ```bash block with a curl request"
    assert first_request < FIRST_REQUEST_BEFORE, f"the first request starts at line {first_request}"


def test_readme_shows_make_test():
    assert mentions(README.read_text(encoding="utf-8"), "make test")
