"""The package's structure, read from its source (nothing imported): no two modules of a package
import each other at run time, a package uses another package's public face only, and every
file name a comment or docstring points at exists in the repository."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gemsim"
# Names of files gemsim writes or reads at run time (not files of this repository), and the
# placeholders of examples (`study.yaml`, `my_model.py`).
NOT_REPOSITORY_FILES = {"calibrated.yaml", "models.py"}
PLACEHOLDERS = ("my_", "study.", "scenario.")
FILE_NAME = re.compile(r"(?<![\w/.-])([A-Za-z_][\w/.-]*\.(?:py|md|yaml|ipynb))\b")


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import but those under `if TYPE_CHECKING:` (those never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in skipped
    ]


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The gemsim modules an import statement loads (for `from x import y`: x.y where that is
    a module, else x)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = module.split(".")
        if node.level:
            package = base if MODULES[module].name == "__init__.py" else base[:-1]
            package = package[: len(package) - (node.level - 1)]
            prefix = ".".join(package + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        subs = [f"{prefix}.{a.name}" for a in node.names if f"{prefix}.{a.name}" in MODULES]
        names = subs if len(subs) == len(node.names) else [prefix, *subs]
    found = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.append(name)
    return found


def _graph() -> dict[str, set[str]]:
    return {
        m: {t for n in _runtime_imports(ast.parse(p.read_text())) for t in _targets(m, n)}
        for m, p in MODULES.items()
    }


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def test_no_two_modules_of_a_package_import_each_other_at_run_time():
    graph = _graph()
    cycles = []
    for start, deps in graph.items():
        if MODULES[start].name == "__init__.py":
            continue  # a package's face re-exports its modules
        stack, seen = [(d, (start, d)) for d in deps], set()
        while stack:
            node, path = stack.pop()
            if node == start:
                cycles.append(" -> ".join(path))
                break
            if node in seen or MODULES[node].name == "__init__.py":
                continue
            if _package(node) != _package(start):
                continue
            seen.add(node)
            stack.extend((d, (*path, d)) for d in graph.get(node, ()))
    assert cycles == []


def test_a_package_uses_another_packages_public_face_only():
    """`gemsim.x` may import `gemsim.y` (its face) but not `gemsim.y._z`, nor a private module
    of one of its folders (`gemsim.y.z._w`); gemsim's own top-level private modules
    (`gemsim._checks`, ...) are shared by every package."""
    private = []
    for module, path in MODULES.items():
        for node in _runtime_imports(ast.parse(path.read_text())):
            for target in _targets(module, node):
                parts = target.split(".")
                if len(parts) < 3 or _package(target) == _package(module):
                    continue
                if any(p.startswith("_") and not p.startswith("__") for p in parts[2:]):
                    private.append(f"{path.relative_to(ROOT)}:{node.lineno} -> {target}")
    assert private == []


def _repository_files() -> set[str]:
    names = set()
    for _folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        names.update(files)
    return names


def test_every_file_a_comment_or_docstring_names_exists():
    known = _repository_files() | NOT_REPOSITORY_FILES
    missing = []
    for path in sorted(MODULES.values()):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name in FILE_NAME.findall(line):
                base = name.rsplit("/", 1)[-1]
                if "{" in name or "*" in name or base.startswith(PLACEHOLDERS):
                    continue
                if base not in known:
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {name}")
    assert missing == []


def test_design_md_lists_every_module_of_the_grouped_packages_folders():
    """docs/design.md §2 describes `gemsim/app/` and `gemsim/problems/` folder by folder: each
    row names exactly the modules its folder holds (a file added, moved or renamed without
    its row fails here)."""
    text = (ROOT / "docs" / "design.md").read_text()
    rows = re.findall(r"^\| `((?:app|problems)/(?:\w+/)?)`(?: \(root\))? \|(.*)$", text, re.M)
    assert len(rows) >= 10
    wrong = []
    for folder, row in rows:
        if folder == "app/":
            continue  # the app row is the package's summary; its folders have rows below
        named = set(re.findall(r"(?<![\w/])(_\w+\.py)", row))
        files = {p.name for p in (PACKAGE / folder).glob("*.py") if p.name != "__init__.py"}
        if named != files:
            wrong.append(
                f"{folder}: not in the tree {sorted(named - files)}, "
                f"not in the row {sorted(files - named)}"
            )
    assert wrong == []
