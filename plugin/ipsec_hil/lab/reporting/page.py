"""The run's page as one typed document: built during the run, rendered and written once.

Why (issue 53): the page used to be written (``report.write_page``), then read back and
rewritten with the sections plugins gave (Markdown strings), and Markdown was spelled in
the plugin glue. Now the run's context holds one :class:`PageDocument`; the controller
gives it the run's facts and entries, each part adds :class:`Section` objects (plain data:
a title and typed blocks), and :meth:`PageDocument.write` renders everything here, in
``ipsec_hil.lab.reporting``, and writes the file once.

A section's blocks: :class:`Paragraph`, :class:`Bullets` (of :class:`Item`, which may nest),
:class:`Table`, :class:`Preformatted`, :class:`Subsection`; inline text is a sequence of
``str`` (plain), :class:`Bold`, :class:`Code` and :class:`Image`. :class:`Markdown` carries a section a
driver repository's conftest rendered itself (a ``str`` from ``pytest_hil_page_sections``); the
suite's own sections are typed (the library records': ipsec_hil.lab.reporting.sections).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from ipsec_hil.lab.reporting.report import PageEntry, RunInfo, page_links, render_page


@dataclass(frozen=True)
class _Text:
    """A piece of the page that is one string: the subclass says how it renders (one field,
    one constructor, one equality for all of them; a Bold and a Code of one text differ)."""

    text: str


class Bold(_Text):
    """Inline: ``**text**``."""


class Code(_Text):
    """Inline: the text in backticks."""


class Preformatted(_Text):
    """A block of fixed-width text (a counter ledger), shown as it is."""


class Markdown(_Text):
    """A section rendered outside the suite (``## Title`` and its body): a driver repository's."""


@dataclass(frozen=True)
class Image:
    """A picture (a plot), its path relative to the page."""

    alt: str
    path: str


Inline = Union[str, Bold, Code, Image]
Text = Union[Inline, Sequence[Inline]]


@dataclass(frozen=True)
class Paragraph:
    text: Text


@dataclass(frozen=True)
class Item:
    """One bullet; ``items`` nest under it (two spaces deeper)."""

    text: Text
    items: tuple[Item, ...] = ()


@dataclass(frozen=True)
class Bullets:
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Table:
    """A Markdown table: the header's cells are plain, a row's cells inline text; ``align``
    per column, "right" for figures (``---:``), anything else (or none given) the default."""

    header: tuple[str, ...]
    rows: tuple[tuple[Text, ...], ...]
    align: tuple[str, ...] = ()


@dataclass(frozen=True)
class Section:
    """A part's section of the page: ``## title`` and its blocks, in order."""

    title: str
    blocks: tuple[Block, ...]


class Subsection(Section):
    """A section among another section's blocks: its heading one level deeper."""


Block = Union[Paragraph, Bullets, Table, Preformatted, Subsection]


# --------------------------------------------------------------------------- rendering


def inline(text: Text) -> str:
    parts = [text] if isinstance(text, (str, Bold, Code, Image)) else list(text)
    out = []
    for p in parts:
        if isinstance(p, Bold):
            out.append(f"**{p.text}**")
        elif isinstance(p, Code):
            out.append(f"`{p.text}`")
        elif isinstance(p, Image):
            out.append(f"![{p.alt}]({p.path})")
        else:
            out.append(str(p))
    return "".join(out)


def _item_lines(item: Item, depth: int) -> list[str]:
    lines = [f"{'  ' * depth}- {inline(item.text)}"]
    for sub in item.items:
        lines += _item_lines(sub, depth + 1)
    return lines


def _block_lines(block: Block, level: int) -> list[str]:
    if isinstance(block, Paragraph):
        return [inline(block.text)]
    if isinstance(block, Bullets):
        return [line for item in block.items for line in _item_lines(item, 0)]
    if isinstance(block, Table):
        right = {i for i, a in enumerate(block.align) if a == "right"}
        rules = ("---:" if i in right else "---" for i in range(len(block.header)))
        return (["| " + " | ".join(block.header) + " |", "|" + "|".join(rules) + "|"]
                + ["|" + "|".join(f" {inline(c)} " if inline(c) else " " for c in row) + "|" for row in block.rows])
    if isinstance(block, Preformatted):
        return ["```", block.text.rstrip("\n"), "```"]
    if isinstance(block, Subsection):
        return _heading_and_blocks(block.title, block.blocks, level + 1)
    raise TypeError(f"not a page block: {block!r}")


def _heading_and_blocks(title: str, blocks: Sequence[Block], level: int) -> list[str]:
    lines = ["#" * level + " " + title]
    for b in blocks:
        lines += ["", *_block_lines(b, level)]
    return lines


def render_section(section: Section | Markdown) -> str:
    """A section's Markdown, without trailing newlines."""
    if isinstance(section, Markdown):
        return section.text.rstrip("\n")
    return "\n".join(_heading_and_blocks(section.title, section.blocks, 2)).rstrip("\n")


@dataclass
class PageDocument:
    """The run's page: its facts (:class:`RunInfo`), its tests (:class:`PageEntry`) and the
    parts' sections, rendered by :meth:`render` and written once by :meth:`write`."""

    run: RunInfo | None = None
    entries: list[PageEntry] = field(default_factory=list)
    sections: list[Section | Markdown] = field(default_factory=list)

    def add(self, section: Section | Markdown | str | Sequence[Section | Markdown | str] | None) -> None:
        """Add a part's section, or several (None: the part has nothing to say; a ``str`` is a
        section a driver repository's conftest rendered itself)."""
        if section is None:
            return
        if isinstance(section, (list, tuple)):
            for s in section:
                self.add(s)
            return
        self.sections.append(Markdown(section) if isinstance(section, str) else section)

    def render(self, base: Path | None = None, allure: dict[str, str] | None = None) -> str:
        if self.run is None:
            raise ValueError("the page has no run facts (PageDocument.run)")
        text = render_page(self.run, self.entries, base=base, allure=allure).rstrip("\n")
        for s in self.sections:
            text += "\n\n" + render_section(s)
        return text + "\n"

    def write(self, directory: str | os.PathLike[str], name: str = "measurement-page.md",
              allure_results: str | os.PathLike[str] | None = None) -> Path:
        """Render and write the page into ``directory`` (created), once, atomically; its path.
        ``allure_results``: the run's Allure results directory, to link each test's result."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        path = d / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.render(base=d, allure=page_links(self.entries, allure_results, d)), encoding="utf-8")
        os.replace(tmp, path)
        return path


__all__ = ["Bold", "Bullets", "Code", "Image", "Item", "Markdown", "PageDocument", "Paragraph", "Preformatted", "Section",
           "Subsection", "Table", "render_section"]
