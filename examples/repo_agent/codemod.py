"""The agent's tools on code: sources, ruff (survey, fix, lint), patches, and verification.

Everything here is plain functions on paths and JSON data; the workflow decides which of them
are durable steps. Ruff always runs ``--isolated`` (no project configuration leaks in) and
``--no-cache``; the copy of the code under work is never touched by a tool except through the
materialization of approved-to-be patches.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from .proc import run as run_child

#: CPython test modules exercising a standard-library package (checked for presence at run time).
STDLIB_TESTS: dict[str, list[str]] = {
    "json": ["test.test_json"],
    "email": ["test.test_email"],
    "tomllib": ["test.test_tomllib"],
    "urllib": ["test.test_urlparse", "test.test_urllib", "test.test_urllib2"],
    "http": ["test.test_http_cookies", "test.test_http_cookiejar", "test.test_httplib"],
    "wsgiref": ["test.test_wsgiref"],
    "xml": ["test.test_xml_etree", "test.test_minidom", "test.test_sax"],
    "concurrent": ["test.test_concurrent_futures"],
}

_IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "*.pyo", ".git", ".hg", ".venv", ".tox", ".mypy_cache", ".ruff_cache"
)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    return sha256_bytes(path.read_bytes())


def target_version() -> str:
    """Ruff's name for the running interpreter's version, e.g. ``py311``."""
    return f"py{sys.version_info.major}{sys.version_info.minor}"


# ------------------------------------------------------------------ sources


def stdlib_dir(package: str) -> Path:
    """The directory of a standard-library package of the running interpreter."""
    root = Path(sysconfig.get_paths()["stdlib"])
    path = root / package
    if not (path / "__init__.py").is_file():
        raise ValueError(f"{package!r} is not a package of the standard library in {root}")
    return path


def test_modules_for(packages: list[str]) -> tuple[list[str], str]:
    """The CPython test modules present for ``packages``, and a note on what is missing."""
    if importlib.util.find_spec("test") is None:
        return [], "the interpreter has no `test` package (CPython's tests are not installed)"
    found: list[str] = []
    missing: list[str] = []
    for pkg in packages:
        for mod in STDLIB_TESTS.get(pkg, [f"test.test_{pkg}"]):
            try:
                present = importlib.util.find_spec(mod) is not None
            except ImportError:
                present = False
            (found if present else missing).append(mod)
    note = f"test modules not installed: {', '.join(missing)}" if missing else ""
    return found, note


def copy_sources(source: dict[str, Any], dest: Path) -> dict[str, Any]:
    """Copy the code base into ``dest`` (replacing it); return the manifest of what was copied.

    ``source`` is ``{"kind": "stdlib", "packages": [...]}`` or ``{"kind": "path", "path": ...}``.
    The copy is built next to ``dest`` and renamed into place, so a crash never leaves a
    half-copied tree that looks complete.
    """
    dest = Path(dest)
    staging = dest.with_name(dest.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    roots: list[str] = []
    if source["kind"] == "stdlib":
        for pkg in source["packages"]:
            shutil.copytree(stdlib_dir(pkg), staging / pkg, ignore=_IGNORE)
            roots.append(pkg)
    else:
        src = Path(source["path"])
        if src.is_dir():
            shutil.copytree(src, staging / src.name, ignore=_IGNORE, symlinks=True)
        elif src.is_file():
            shutil.copy2(src, staging / src.name)
        else:
            raise FileNotFoundError(f"no such file or directory: {src}")
        roots.append(src.name)
    files: list[dict[str, Any]] = []
    for p in sorted(staging.rglob("*")):
        if p.is_file() and not p.is_symlink():
            files.append(
                {
                    "path": p.relative_to(staging).as_posix(),
                    "sha256": sha256_file(p),
                    "size": p.stat().st_size,
                }
            )
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(staging, dest)
    return {
        "roots": roots,
        "files": files,
        "python_files": sum(1 for f in files if f["path"].endswith(".py")),
        "bytes": sum(f["size"] for f in files),
    }


def check_manifest(root: Path, files: list[dict[str, Any]]) -> None:
    """Refuse to go on if the frozen copy no longer matches its recorded manifest."""
    for f in files:
        p = root / f["path"]
        if not p.is_file() or sha256_file(p) != f["sha256"]:
            raise RuntimeError(
                f"{p} changed since it was copied (expected sha256 {f['sha256'][:12]}); "
                "the frozen copy of the code base was modified outside the run"
            )


# ------------------------------------------------------------------ ruff


def ruff_cmd() -> list[str]:
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    exe = shutil.which("ruff")
    if exe is None:
        raise RuntimeError("ruff is not installed (uv sync installs it with the dev group)")
    return [exe]


def ruff_version() -> str:
    out = run_child([*ruff_cmd(), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _ruff(args: list[str], *, cwd: Path, stdin: bytes | None = None) -> bytes:
    proc = run_child(
        [*ruff_cmd(), "check", "--isolated", "--no-cache", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        timeout=600,
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"ruff failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    return proc.stdout


def ruff_findings(
    root: Path, paths: list[str], select: str, target: str, fix_only: bool = False
) -> list[dict[str, Any]]:
    """Ruff diagnostics for ``paths`` (relative to ``root``) as ``{path, code, row, fix}``."""
    if not paths:
        return []
    out: list[dict[str, Any]] = []
    chunk = 500  # keep command lines short on big code bases
    for i in range(0, len(paths), chunk):
        raw = _ruff(
            [
                "--select",
                select,
                "--target-version",
                target,
                "--output-format",
                "json",
                "--exit-zero",
                "--",
                *paths[i : i + chunk],
            ],
            cwd=root,
        )
        for d in json.loads(raw or b"[]"):
            fix = d.get("fix")
            out.append(
                {
                    "path": Path(d["filename"]).resolve().relative_to(root.resolve()).as_posix(),
                    "code": d.get("code") or "syntax-error",
                    "row": (d.get("location") or {}).get("row"),
                    "fix": fix["applicability"] if fix else "none",
                }
            )
    return out


def survey(
    root: Path, files: list[dict[str, Any]], select: str, target: str
) -> dict[str, dict[str, Any]]:
    """Per Python file: its hash and ruff's findings counted by rule and fix applicability."""
    py = [f for f in files if f["path"].endswith(".py")]
    found: dict[str, dict[str, Any]] = {
        f["path"]: {"sha256": f["sha256"], "findings": {}} for f in py
    }
    for d in ruff_findings(root, [f["path"] for f in py], select, target):
        if d["path"] not in found:
            continue
        counts = found[d["path"]]["findings"].setdefault(
            d["code"], {"safe": 0, "unsafe": 0, "none": 0}
        )
        kind = d["fix"] if d["fix"] in ("safe", "unsafe") else "none"
        counts[kind] += 1
    return {p: v for p, v in found.items() if v["findings"]}


def ruff_fix(source: bytes, path: str, rules: list[str], target: str, unsafe: bool) -> bytes:
    """``source`` with ruff's fixes for ``rules`` applied (ruff reads stdin, writes stdout)."""
    with tempfile.TemporaryDirectory(prefix="torpor-ruff-") as cwd:
        return _ruff(
            [
                "--select",
                ",".join(rules),
                "--target-version",
                target,
                "--fix",
                "--exit-zero",
                *(["--unsafe-fixes"] if unsafe else ["--no-unsafe-fixes"]),
                "--stdin-filename",
                path,
                "-",
            ],
            cwd=Path(cwd),
            stdin=source,
        )


# ------------------------------------------------------------------ patches

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def split_lines(text: str) -> list[str]:
    """Lines split on ``\\n`` only (keeping it); form feeds and friends stay inside a line."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def make_patch(path: str, old: str, new: str) -> str:
    """A unified diff ``a/path`` -> ``b/path`` (``git apply`` compatible); "" if unchanged."""
    out: list[str] = []
    for line in difflib.unified_diff(
        split_lines(old), split_lines(new), f"a/{path}", f"b/{path}", n=3
    ):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def patch_paths(patch: str) -> list[str]:
    """The files a (combined) patch changes, in order."""
    return [ln[6:].rstrip("\n") for ln in split_lines(patch) if ln.startswith("+++ b/")]


def split_patch(patch: str) -> dict[str, str]:
    """A combined patch as ``{path: that file's patch}``."""
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    lines = split_lines(patch)
    for i, ln in enumerate(lines):
        if ln.startswith("--- a/") and i + 1 < len(lines) and lines[i + 1].startswith("+++ b/"):
            current = parts.setdefault(lines[i + 1][6:].rstrip("\n"), [])
        if current is None:
            raise ValueError("patch does not start with a file header")
        current.append(ln)
    return {k: "".join(v) for k, v in parts.items()}


def apply_patch(old: str, patch: str) -> str:
    """Apply a one-file unified diff made by :func:`make_patch`; refuse on any mismatch."""
    src = split_lines(old)
    lines = split_lines(patch)
    out: list[str] = []
    pos = 0
    i = 0
    while i < len(lines) and not lines[i].startswith("@@"):
        i += 1
    while i < len(lines):
        m = _HUNK.match(lines[i])
        if m is None:
            raise ValueError(f"malformed hunk header: {lines[i]!r}")
        old_len = int(m.group(2)) if m.group(2) is not None else 1
        start = int(m.group(1)) - 1 if old_len else int(m.group(1))
        i += 1
        before: list[str] = []
        after: list[str] = []
        last = ""
        while i < len(lines) and not lines[i].startswith("@@"):
            ln = lines[i]
            tag, body = ln[:1], ln[1:]
            if tag == "\\":
                if last in (" ", "-"):
                    before[-1] = before[-1].removesuffix("\n")
                if last in (" ", "+"):
                    after[-1] = after[-1].removesuffix("\n")
            elif tag == " ":
                before.append(body)
                after.append(body)
            elif tag == "-":
                before.append(body)
            elif tag == "+":
                after.append(body)
            else:
                raise ValueError(f"malformed patch line: {ln!r}")
            last = tag if tag != "\\" else last
            i += 1
        if start < pos or src[start : start + len(before)] != before:
            raise ValueError(f"hunk at line {start + 1} does not apply: the file differs")
        out.extend(src[pos:start])
        out.extend(after)
        pos = start + len(before)
    out.extend(src[pos:])
    return "".join(out)


def materialize(pristine: Path, tree: Path, patches: dict[str, str]) -> dict[str, str]:
    """Rebuild ``tree`` = ``pristine`` + ``patches``; return ``{path: sha256}`` of patched files.

    Built in a staging directory and renamed into place: a crash leaves either the old tree or
    the new one.
    """
    staging = tree.with_name(tree.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(pristine, staging)
    hashes: dict[str, str] = {}
    for path, patch in patches.items():
        target = staging / path
        old = target.read_bytes().decode("utf-8", "surrogateescape")
        new = apply_patch(old, patch).encode("utf-8", "surrogateescape")
        target.write_bytes(new)
        hashes[path] = sha256_bytes(new)
    shutil.rmtree(tree, ignore_errors=True)
    os.rename(staging, tree)
    return hashes


# ------------------------------------------------------------------ verification


def check_compiles(tree: Path) -> tuple[bool, dict[str, Any]]:
    """``python -m compileall`` over the tree (bytecode goes to a temporary prefix)."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="torpor-pyc-") as prefix:
        env = dict(os.environ, PYTHONPYCACHEPREFIX=prefix)
        proc = run_child(
            [sys.executable, "-m", "compileall", "-q", "-f", str(tree)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    n = sum(1 for _ in tree.rglob("*.py"))
    detail = {
        "tool": "compileall",
        "files": n,
        "returncode": proc.returncode,
        "seconds": round(time.monotonic() - t0, 2),
    }
    if proc.returncode != 0:
        detail["errors"] = (proc.stdout + proc.stderr)[-2000:]
    return proc.returncode == 0, detail


def check_lint(tree: Path, plan_files: list[dict[str, Any]], target: str) -> tuple[bool, Any]:
    """Ruff reports nothing for any (file, rule) the plan fixed."""
    planned = {(f["path"], r) for f in plan_files for r in f["rules"]}
    rules = sorted({r for _, r in planned})
    paths = sorted({p for p, _ in planned})
    remaining = (
        [
            d
            for d in ruff_findings(tree, paths, ",".join(rules), target)
            if (d["path"], d["code"]) in planned
        ]
        if rules
        else []
    )
    detail: dict[str, Any] = {
        "tool": ruff_version(),
        "files": len(paths),
        "rules": rules,
        "remaining": len(remaining),
    }
    if remaining:
        detail["examples"] = [f"{d['path']}:{d['row']} {d['code']}" for d in remaining[:10]]
    return not remaining, detail


_TEST_RUNNER = r"""
import sys
tree, packages, modules = sys.argv[1], [p for p in sys.argv[2].split(",") if p], sys.argv[3:]
sys.path.insert(0, tree)  # before anything else is imported: the copy must shadow the stdlib
import importlib, io, json, os, time, unittest
loaded = {}
for p in packages:
    m = importlib.import_module(p)
    loaded[p] = os.path.realpath(getattr(m, "__file__", "") or "")
from test import support
support.use_resources = []  # like regrtest without -u: no network, no very slow resources
report = {"loaded_from": loaded, "modules": {}}
for name in modules:
    t0 = time.monotonic()
    suite = unittest.defaultTestLoader.loadTestsFromName(name)
    stream = io.StringIO()
    r = unittest.TextTestRunner(stream=stream, verbosity=0).run(suite)
    report["modules"][name] = {
        "run": r.testsRun, "failures": len(r.failures), "errors": len(r.errors),
        "skipped": len(r.skipped), "ok": r.wasSuccessful(),
        "seconds": round(time.monotonic() - t0, 2),
        "first_problem": (r.failures + r.errors)[0][1][-1500:] if not r.wasSuccessful() else "",
    }
print("TORPOR-TESTS " + json.dumps(report))
"""


def check_tests(
    tree: Path, packages: list[str], modules: list[str], scratch: Path
) -> tuple[bool, Any]:
    """Run CPython's test modules with the modified copy first on ``sys.path``.

    They run in ``scratch`` (emptied first): CPython's tests write temporary files into their
    working directory, and a test killed midway leaves them behind.
    """
    t0 = time.monotonic()
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    proc = run_child(
        [sys.executable, "-I", "-c", _TEST_RUNNER, str(tree), ",".join(packages), *modules],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    line = next(
        (ln for ln in proc.stdout.splitlines() if ln.startswith("TORPOR-TESTS ")),
        None,
    )
    if line is None:
        return False, {
            "error": f"test runner exited {proc.returncode} without a report",
            "stderr": proc.stderr[-2000:],
        }
    report = json.loads(line.removeprefix("TORPOR-TESTS "))
    root = os.path.realpath(tree)
    wrong = {p: f for p, f in report["loaded_from"].items() if not f.startswith(root + os.sep)}
    mods = report["modules"]
    passed = not wrong and all(m["ok"] and m["run"] > 0 for m in mods.values())
    detail: dict[str, Any] = {
        "modules": {
            k: {x: v[x] for x in ("run", "failures", "errors", "skipped", "seconds")}
            for k, v in mods.items()
        },
        "tests_run": sum(m["run"] for m in mods.values()),
        "seconds": round(time.monotonic() - t0, 2),
        "loaded_from_copy": not wrong,
    }
    if wrong:
        detail["not_from_copy"] = wrong
    problems = {k: v["first_problem"] for k, v in mods.items() if v["first_problem"]}
    if problems:
        detail["problems"] = problems
    return passed, detail
