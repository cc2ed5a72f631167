"""A small mutator of our own for the C++ kernels: where a bug could be planted, and planting it.

Python has mutation tools on the package index (``cosmic-ray`` runs ours); C++ kernels do not have
one that fits a CMake extension built against torch, so this finds sites by the project's own
formatting (clang-format puts spaces around binary operators, so `` < `` is a comparison where
``<float>`` is a template argument and ``<<`` a stream) and replaces one operator at one site.
Comments, string literals and preprocessor lines are never mutated: a mutant there compiles to
the same kernel (an equivalent mutant by construction, wasted time).

A site is (line number, column, original, replacement); applying one returns the mutated text,
and the file on disk is restored from the original text by the runner.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

# Each operator and what a slip of the hand would have written instead. Spaces on both sides keep
# pointer declarations (`float *p`), templates and `->` out.
REPLACEMENTS: dict[str, tuple[str, ...]] = {
    " < ": (" <= ", " > "),
    " <= ": (" < ",),
    " > ": (" >= ", " < "),
    " >= ": (" > ",),
    " == ": (" != ",),
    " != ": (" == ",),
    " && ": (" || ",),
    " || ": (" && ",),
    " + ": (" - ",),
    " - ": (" + ",),
    " * ": (" + ",),
    " / ": (" * ",),
    " += ": (" -= ", " = "),
    " -= ": (" += ",),
    " *= ": (" += ",),
    "std::max(": ("std::min(",),
    "std::min(": ("std::max(",),
    " + 1": (" + 2", ""),
    " - 1": (" - 2", ""),
}
_PATTERN = re.compile("|".join(re.escape(op) for op in sorted(REPLACEMENTS, key=len, reverse=True)))


@dataclass(frozen=True)
class Site:
    line: int  # 1-based
    column: int  # 0-based, in the line
    original: str
    replacement: str

    def describe(self) -> str:
        return f"line {self.line}: {self.original.strip() or repr(self.original)} -> " \
               f"{self.replacement.strip() or 'removed'}"


def _code_spans(line: str, in_block_comment: bool) -> tuple[list[tuple[int, int]], bool]:
    """The [start, end) spans of a line that are code (not comment, not string or char literal)."""
    spans, start, i, n = [], 0, 0, len(line)
    if line.lstrip().startswith("#"):
        return [], in_block_comment
    while i < n:
        if in_block_comment:
            end = line.find("*/", i)
            if end < 0:
                return spans, True
            in_block_comment, i = False, end + 2
            start = i
            continue
        two = line[i:i + 2]
        if two == "//":
            spans.append((start, i))
            return spans, False
        if two == "/*":
            spans.append((start, i))
            in_block_comment, i = True, i + 2
            continue
        if line[i] in "\"'":
            spans.append((start, i))
            quote, i = line[i], i + 1
            while i < n and line[i] != quote:
                i += 2 if line[i] == "\\" else 1
            i += 1
            start = i
            continue
        i += 1
    spans.append((start, n))
    return spans, in_block_comment


def sites(text: str) -> list[Site]:
    """Every (site, replacement) this mutator can plant in a C++ source, in file order."""
    found, in_comment = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        spans, in_comment = _code_spans(line, in_comment)
        for lo, hi in spans:
            for match in _PATTERN.finditer(line, lo, hi):
                if match.end() > hi:
                    continue
                original = match.group(0)
                candidates = [original]
                if original in (" + 1", " - 1"):
                    # the operator itself too; the literal only where it is the literal 1 (not 10, not 1.5f)
                    candidates = [original[:3]]
                    if not (match.end() < len(line) and (line[match.end()].isalnum() or line[match.end()] == ".")):
                        candidates.append(original)
                for candidate in candidates:
                    for replacement in REPLACEMENTS[candidate]:
                        found.append(Site(number, match.start(), candidate, replacement))
    return found


def apply(text: str, site: Site) -> str:
    """The text with the one mutation of ``site``; raises if the text there is not what the site says."""
    lines = text.split("\n")
    line = lines[site.line - 1]
    if line[site.column:site.column + len(site.original)] != site.original:
        raise ValueError(f"{site.describe()}: the source changed since the sites were found")
    lines[site.line - 1] = line[:site.column] + site.replacement + line[site.column + len(site.original):]
    return "\n".join(lines)


def sample(all_sites: list[Site], n: int, seed: int) -> list[Site]:
    """``n`` sites at distinct places (one replacement each), drawn reproducibly from ``seed``."""
    by_place: dict[tuple[int, int], list[Site]] = {}
    for site in all_sites:
        by_place.setdefault((site.line, site.column), []).append(site)
    rng = random.Random(seed)
    places = sorted(by_place)
    chosen = sorted(rng.sample(places, min(n, len(places))))
    return [rng.choice(by_place[place]) for place in chosen]
