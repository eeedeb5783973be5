"""Every file, test, module, section, command and option that a doc, docstring or message names exists.

Signposts drift when rooms move: a docstring that cites a renamed test, a message that sends the
user to a section that moved, a README line with an option that was dropped. This test reads every
Markdown file and every Python file of the project and checks what they name:

- paths under the project's top folders (`sil/...`, `tests/...::test_name`, `docs/...`);
- dotted modules (`sil.review.status`, `sil.exec.measure.AuditBackend`), one attribute deep;
- `python -m MODULE` and `make TARGET`;
- sections: `statistics.md §3`, `(docs/reference.md: Signing set-up)`;
- `sil` commands and their `--options` inside code spans;
- and no layer label from an older scheme ("Layer L2"): layers are `sil.LAYERS`.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import click
import typer

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", "__pycache__", "build", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"}
# Folders a run creates: a path under them names what a run writes, not a file of the project.
RUN_MADE = (
    "state/runs",
    "state/contracts",
    "state/approvals",
    "state/sweeps",
    "state/noise",
    "state/allowed_signers",
    "state/anchors.git",
    "bench/results",
)
# Names that look like modules but are entry point groups or registry names.
NOT_MODULES = {"sil.backends", "sil.proposers"}
EXTENSIONS = {".py", ".md", ".json", ".jsonl", ".yaml", ".yml", ".toml", ".txt", ".html", ".png", ".sh", ".cfg"}
PLACEHOLDER = re.compile(r"[A-Z]{3,}|\.\.")
TOP = r"(?:sil|sil_policy|sil_runtime|bench|tests|docs|examples|measurement|state|\.ci)"
PATH = re.compile(rf"(?<![\w/.\-<{{$])({TOP}/[\w./\-]*[\w/])(?:::(\w+\*?))?")
TEST_REF = re.compile(r"(?<![\w/])(test_\w+\.py)::(\w+)")
MODULE = re.compile(r"(?<![\w./-])((?:sil|sil_policy|sil_runtime|bench)(?:\.[A-Za-z_]\w*)+)")
RUN_MODULE = re.compile(r"python3?(?:\.12)? -m ([\w.]+)")
MAKE = re.compile(r"(?<![\w-])make ([a-z][\w-]*)")
SECTION_SIGN = re.compile(r"([\w./-]+\.md) §\s?(\d+)")
SECTION_NAMED = re.compile(r"\((README(?:\.md)?|[\w./-]+\.md): ([A-Z][\w ,'-]{2,40})\)")
CODE_SPAN = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", re.S)
SIL_COMMAND = re.compile(r"(?:^|[\s(;&|$])sil((?: [a-z][\w-]*)+)((?: [^|;&#\n]*)?)")
OLD_LAYER = re.compile(r"\bLayer L\d")


def project_files(*suffixes: str) -> Iterator[Path]:
    found = []
    for folder, dirs, files in os.walk(ROOT):  # pruned: the virtualenv alone holds tens of thousands of files
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        found += [Path(folder, f) for f in files if Path(f).suffix in suffixes]
    for path in sorted(found):
        if not str(path.relative_to(ROOT)).startswith(RUN_MADE) and path.is_file():
            yield path


# Results files record what produced them at their commit (the code they name may have moved since);
# the frozen measurement is hashed, so its text changes only with a new measurement version.
RECORDS = ("docs/results/", "measurement/")


def prose_of_python(source: str) -> str:
    """A Python file's strings and comments (docstrings, messages): where it names things to a reader."""
    parts = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.STRING, tokenize.COMMENT, tokenize.FSTRING_MIDDLE):
                parts.append(tok.string)
    except (tokenize.TokenError, SyntaxError):
        return source
    return "\n".join(parts)


def texts() -> Iterator[tuple[str, str]]:
    for path in project_files(".md", ".py"):
        name = str(path.relative_to(ROOT))
        if path == Path(__file__).resolve() or name.startswith(RECORDS):
            continue  # its own examples of drift; records of past commits
        text = path.read_text(encoding="utf-8")
        yield name, prose_of_python(text) if path.suffix == ".py" else text


@cache
def defined_names(path: Path) -> frozenset[str]:
    """Names a Python file defines at any depth (functions, classes, assignments)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def missing_path(ref: str, test: str | None) -> str | None:
    ref = ref.rstrip("/.")
    if ref.startswith(RUN_MADE) or PLACEHOLDER.search(ref):
        return None
    target = ROOT / ref
    stem, dot, attribute = ref.rpartition(".")
    if dot and not target.exists() and "/" not in attribute and f".{attribute}" not in EXTENSIONS:
        module = ROOT / f"{stem}.py"  # sil/base/errors.ExitCode: a name in a file
        if not module.is_file() or attribute not in defined_names(module):
            return f"{ref} does not exist"
        return None
    if not target.suffix and not target.exists():
        return None  # no extension: a registry name (`sil_runtime/runtime_target`), not a file
    if not target.exists():
        return f"{ref} does not exist"
    if test and target.suffix == ".py":
        names = defined_names(target)
        found = any(n.startswith(test[:-1]) for n in names) if test.endswith("*") else test in names
        if not found:
            return f"{ref} has no {test}"
    return None


def missing_module(dotted: str) -> str | None:
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        found = module_file(".".join(parts[:end]))
        if found is None:
            continue
        rest = parts[end:]
        if (
            rest
            and not rest[0].startswith("__")
            and rest[0] not in defined_names(found)
            and module_file(".".join(parts[: end + 1])) is None
        ):
            return f"{dotted}: {'.'.join(parts[:end])} has no {rest[0]}"
        return None
    return f"{dotted}: no such module"


def heading_exists(doc: str, title: str) -> bool:
    path = ROOT / ("README.md" if doc.startswith("README") else doc)
    if not path.is_file():
        candidates = list(ROOT.glob(f"**/{Path(doc).name}"))
        path = candidates[0] if candidates else path
    if not path.is_file():
        return False
    headings = [line.lstrip("#").strip().lower() for line in path.read_text().splitlines() if line.startswith("#")]
    wanted = title.strip().lower()
    if wanted.startswith("§"):  # `§2` names a numbered section: "## §2 ..." or "## 2. ..."
        number = wanted[1:]
        return any(h.startswith((f"§{number} ", f"{number}. ", f"{number} ")) for h in headings)
    return any(wanted in h for h in headings)


@cache
def cli() -> click.Command:
    from sil.cli.app import app

    return typer.main.get_command(app)


def missing_command(words: list[str], options: list[str]) -> str | None:
    """`sil WORDS --OPTIONS`: every subcommand and option must exist (words past the command are arguments)."""
    command = cli()
    for word in words:
        subcommands: dict[str, click.Command] | None = getattr(command, "commands", None)
        if subcommands is None:
            break
        sub = subcommands.get(word)
        if sub is None:
            return f"sil {' '.join(words)}: no command {word!r}"
        command = sub
    known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
    unknown = [o for o in options if o not in known]
    return f"sil {' '.join(words)}: no option {', '.join(unknown)}" if unknown else None


def code_spans(text: str) -> Iterator[str]:
    for block, span in CODE_SPAN.findall(text):
        yield from (block.splitlines() if block else [span])


def sil_commands(text: str) -> Iterator[tuple[list[str], list[str]]]:
    for span in code_spans(text):
        for words, tail in SIL_COMMAND.findall(span):
            names = [w for w in words.split() if not w.isupper()]
            options = [t.split("=")[0] for t in tail.split() if t.startswith("--") and len(t) > 2]
            yield names, options


def problems_in(name: str, text: str) -> Iterator[str]:
    for ref, test in PATH.findall(text):
        if (problem := missing_path(ref, test or None)) is not None:
            yield problem
    for file, test in TEST_REF.findall(text):
        found = list(ROOT.glob(f"tests/**/{file}"))
        if not found or test not in defined_names(found[0]):
            yield f"{file}::{test} does not exist"
    modules = set(MODULE.findall(text)) | {m for m in RUN_MODULE.findall(text) if MODULE.fullmatch(m)}
    for dotted in modules - NOT_MODULES:
        if not PLACEHOLDER.search(dotted) and (problem := missing_module(dotted)) is not None:
            yield problem
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    spans = "\n".join(code_spans(text))
    yield from (f"make {t}: no such target" for t in MAKE.findall(spans) if t not in targets)
    for doc, number in SECTION_SIGN.findall(text):
        if not heading_exists(doc, f"§{number}"):
            yield f"{doc} §{number}: no such section"
    for doc, title in SECTION_NAMED.findall(text):
        if not heading_exists(doc, title):
            yield f"({doc}: {title}): no such section"
    if name.endswith(".py") and OLD_LAYER.search(text):
        yield "a layer label from an older scheme ('Layer L…'): name the folder of sil.LAYERS instead"


def test_every_signpost_names_something_that_exists() -> None:
    problems = [f"{name}: {p}" for name, text in texts() for p in problems_in(name, text)]
    assert not problems, "signposts to nowhere:\n" + "\n".join(sorted(set(problems)))


def test_every_sil_command_in_a_code_span_exists() -> None:
    problems = []
    for name, text in texts():
        for words, options in sil_commands(text):
            if words and (problem := missing_command(words, options)) is not None:
                problems.append(f"{name}: {problem}")
    assert not problems, "commands that do not exist:\n" + "\n".join(sorted(set(problems)))


def test_the_checker_catches_drift() -> None:
    """The checks themselves fail on a moved room (so the two tests above can fail)."""
    drifted = (
        "see sil/review/nowhere.py and tests/run/test_train.py::test_no_such_thing, "
        "sil.review.nowhere, sil.exec.measure.NoSuchName, `python -m bench.nowhere`, `make nowhere`, "
        "statistics.md §9, (docs/reference.md: No such heading), sil/base/errors.NoSuchCode"
    )
    assert len(list(problems_in("x.md", drifted))) == 9
    assert missing_command(["run"], ["--no-such-option"]) is not None
    assert missing_command(["nowhere"], []) is not None
    assert list(problems_in("x.py", '"""Layer L2: old."""'))
    assert not list(problems_in("x.md", "sil/run/arms.py, sil.run.arms.CandidateArm, statistics.md §3"))
    assert list(problems_in("x.md", "tests/run/test_train.py::test_no_such_prefix*"))
    assert not list(problems_in("x.md", "tests/run/test_train.py::test_*"))
