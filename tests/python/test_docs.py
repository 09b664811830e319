"""The docs describe the design and point only at what the repository holds: every link and
every path they name resolves, none names a file that is not here (a notes file of the
machine, a run's output folder), and none tells run history (session or round names)."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = sorted({os.path.relpath(p, ROOT) for p in
               [os.path.join(ROOT, "README.md"), *glob.glob(os.path.join(ROOT, "docs", "*.md")),
                *glob.glob(os.path.join(ROOT, "*", "README.md")), *glob.glob(os.path.join(ROOT, "*", "*", "README.md"))]
               if not os.path.relpath(p, ROOT).startswith(("build", ".deps"))})
LINK = re.compile(r"\]\(([^)\s]+)\)")                 # [text](target)
CODE = re.compile(r"`([^`\s]+)`")                       # `a/path.ext`
PATH = re.compile(r"^[\w.\-/]+\.(md|json|png|svg|py|sh|cpp|hpp|h|c|cu|cuh|txt|csv|toml)$")
OUTSIDE = re.compile(r"HARDWARE\.md|/work/|devnotes|\.\./shared/")
# Run history: the grep of the project's guide (`session`, `round N`, `rN`). The measurement log,
# bench/results/README.md, is the one place where runs are named.
HISTORY = re.compile(r"session|round [0-9]|\br[0-9]\b", re.I)


def unresolved(doc):
    here = os.path.dirname(os.path.join(ROOT, doc))
    bad = []
    for n, line in enumerate(open(os.path.join(ROOT, doc)).read().splitlines(), 1):
        for t in LINK.findall(line):
            if re.match(r"^[a-z]+:", t) or t.startswith("#"):
                continue
            if not os.path.exists(os.path.join(here, t.split("#")[0])):
                bad.append(f"{doc}:{n}: link {t}")
        for t in CODE.findall(line):
            if "/" in t and PATH.match(t) and not any(
                    os.path.exists(os.path.join(base, t)) for base in (here, ROOT, os.path.join(ROOT, "src"))):
                bad.append(f"{doc}:{n}: path {t}")
        if OUTSIDE.search(line):
            bad.append(f"{doc}:{n}: names a file outside the repository: {line.strip()[:80]}")
    return bad


def test_the_docs_are_found():
    assert "README.md" in DOCS and "docs/architecture.md" in DOCS and "bench/results/README.md" in DOCS


@pytest.mark.parametrize("doc", DOCS)
def test_every_link_and_path_resolves(doc):
    assert unresolved(doc) == []


def test_a_missing_target_is_caught(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "ROOT", str(tmp_path))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("[b](b.md) and `src/no/such.cpp`; see HARDWARE.md\n[ok](a.md)\n")
    bad = unresolved("docs/a.md")
    assert len(bad) == 3 and "link b.md" in bad[0] and "src/no/such.cpp" in bad[1] and "outside" in bad[2]


@pytest.mark.parametrize("doc", [d for d in DOCS if d.startswith("docs/")])
def test_design_docs_tell_no_run_history(doc):
    lines = open(os.path.join(ROOT, doc)).read().splitlines()
    assert [f"{n}: {line}" for n, line in enumerate(lines, 1) if HISTORY.search(line)] == []
