"""No ticket or issue number in the code, its docstrings or the texts it prints: a reader of the
code cannot follow "issue 35's suite" (the tracker is not in the repository), and a name that says
what a thing is outlives the ticket that asked for it. docs/history.md and CHANGELOG.md keep the
history."""
from __future__ import annotations

import re

from tests.conftest import ROOT

PACKAGES = ("spec", "kernels", "cuda_baseline", "profiles", "analysis", "paper_figures",
            "experiments", "explorations", "tests")
TICKET = re.compile(r"\b(?:issue|ticket)s?\s*#?\d+|(?<![\w&])#\d{1,4}\b", re.IGNORECASE)


def test_no_ticket_numbers_in_code():
    bad = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            if "__pycache__" in f.parts or f == __file__ or f.name == "test_no_ticket_numbers.py":
                continue
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if TICKET.search(line):
                    bad.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not bad, f"{len(bad)} ticket numbers in code:\n" + "\n".join(bad)


def test_the_pattern_finds_what_it_should():
    assert TICKET.search("the shape suite of issue 14") and TICKET.search("see #38")
    assert not TICKET.search("a 14-issue queue") and not TICKET.search("color '#555555'")
