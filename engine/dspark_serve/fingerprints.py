"""Fingerprints of the vLLM code the patch touches: for each touchpoint that is a function or a class, its
signature and a hash of its source, as the supported vLLM has them (``vllm_fingerprints.json``). A vLLM
release that keeps a replaced method's name but changes its body or signature no longer matches, and the
test that compares them (``tests/unit/test_engine_patch_fingerprints.py``) fails naming the touchpoint.

    python -m dspark_serve.fingerprints           # compare the installed vLLM, exit 1 on a change
    python -m dspark_serve.fingerprints --write   # record the installed vLLM's (after a review)
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

RECORDED = Path(__file__).with_name("vllm_fingerprints.json")


def module_file(module: str, root: Path | None = None) -> Path:
    """The source file of ``module``: in the installed vLLM, or under ``root``, a site folder (another
    build's vLLM, read without importing it)."""
    if root is None:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise ImportError(f"no module {module}")
        return Path(spec.origin)
    base = root.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _imported_from(tree: ast.Module, module: str, is_package: bool, name: str) -> str | None:
    """The absolute module ``name`` is imported from in ``tree`` (``from x import name``), if it is."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any((alias.asname or alias.name) == name for alias in node.names):
            if not node.level:
                return node.module
            parts = module.split(".")
            package = parts[: len(parts) - node.level + (1 if is_package else 0)]
            return ".".join([*package, *([node.module] if node.module else [])])
    return None


def _named(body: list[ast.stmt], name: str) -> tuple[list[ast.stmt], bool]:
    """(the definitions of ``name`` in ``body``, whether ``name`` is assigned there as an attribute)."""
    definitions: list[ast.stmt] = [n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name]
    assigned = any(
        (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == name)
        or (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets))
        for n in body
    )
    return definitions, assigned


Found = tuple[str, list[ast.stmt], str, bool]  # (file text, definitions, module, is_package)


def _top_level(module: str, name: str, root: Path | None, hops: int = 0) -> Found | None:
    """Where ``module``'s top-level ``name`` is defined, following re-exports; None for an attribute."""
    path = module_file(module, root)
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    definitions, assigned = _named(tree.body, name)
    if definitions:
        return text, definitions, module, path.name == "__init__.py"
    if assigned:
        return None
    source = _imported_from(tree, module, path.name == "__init__.py", name)
    if source is None or hops > 8:
        raise LookupError(f"{name} is not defined in {path}")
    return _top_level(source, name, root, hops + 1)


def _member(found: Found, name: str, root: Path | None) -> Found | None:
    """A class's member ``name``, in the class or, inherited, in its bases; None for an attribute."""
    text, definitions, module, is_package = found
    cls = definitions[0]
    if not isinstance(cls, ast.ClassDef):
        raise LookupError(f"{name}: {getattr(cls, 'name', '?')} is not a class")
    members, assigned = _named(cls.body, name)
    if members:
        return text, members, module, is_package
    if assigned:
        return None
    for base in cls.bases:
        if isinstance(base, ast.Name):
            base_found = _top_level(module, base.id, root)
            if base_found is not None:
                try:
                    return _member(base_found, name, root)
                except LookupError:
                    continue
    raise LookupError(f"{name} is not defined in class {cls.name} of {module} or its bases")


def source_of(touchpoint: str, root: Path | None = None) -> str | None:
    """The source text of a touchpoint's definition (every definition of that name, a property's setter
    too), read from vLLM's files, not from the live object, so a patch installed in this process does not
    hide vLLM's code; None for an attribute (a field, a constant), which has no source of its own. Raises
    LookupError where that vLLM lacks it."""
    module, _, qualified = touchpoint.partition(":")
    first, *rest = qualified.split(".")
    try:
        found = _top_level(module, first, root)
        for name in rest:
            if found is None:
                return None  # an attribute's attribute
            found = _member(found, name, root)
    except LookupError as exc:
        raise LookupError(f"{touchpoint}: {exc}") from None
    if found is None:
        return None
    text, definitions, _, _ = found
    return "\n".join(textwrap.dedent(ast.get_source_segment(text, node) or "") for node in definitions)


def _signature(source: str) -> str:
    node = ast.parse(source).body[0]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"({ast.unparse(node.args)})" + (f" -> {ast.unparse(node.returns)}" if node.returns else "")
    assert isinstance(node, ast.ClassDef)
    return "class(" + ", ".join(ast.unparse(base) for base in node.bases) + ")"


def fingerprint(touchpoint: str, root: Path | None = None) -> dict[str, str] | None:
    """Signature and source hash of a touchpoint that is a function or a class; None for an attribute."""
    source = source_of(touchpoint, root)
    if source is None:
        return None
    return {"signature": _signature(source), "sha256": hashlib.sha256(source.encode()).hexdigest()[:16]}


def touchpoints() -> list[str]:
    from dspark_serve.engine_plugin import TOUCHPOINTS

    return sorted({point for points in TOUCHPOINTS.values() for point in points})


def current(root: Path | None = None) -> dict[str, dict[str, str]]:
    """The fingerprint of every touchpoint that has one, in the installed vLLM or under ``root``."""
    return {point: found for point in touchpoints() if (found := fingerprint(point, root)) is not None}


def recorded() -> dict[str, Any]:
    return json.loads(RECORDED.read_text(encoding="utf-8"))


def changes(now: dict[str, dict[str, str]], then: dict[str, dict[str, str]]) -> list[str]:
    """One line per touchpoint whose signature or source differs, appeared or went."""
    lines = []
    for point in sorted(set(now) | set(then)):
        if point not in then:
            lines.append(f"{point}: not recorded (run with --write after reviewing it)")
        elif point not in now:
            lines.append(f"{point}: recorded but no longer has source in this vLLM")
        elif now[point]["signature"] != then[point]["signature"]:
            lines.append(f"{point}: signature {then[point]['signature']} -> {now[point]['signature']}")
        elif now[point]["sha256"] != then[point]["sha256"]:
            lines.append(f"{point}: source changed ({then[point]['sha256']} -> {now[point]['sha256']})")
    return lines


def main(argv: list[str] | None = None) -> int:
    import vllm

    argv = sys.argv[1:] if argv is None else argv
    now = current()
    if argv == ["--write"]:
        RECORDED.write_text(json.dumps({"vllm": vllm.__version__, "touchpoints": now}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"{len(now)} fingerprints of vLLM {vllm.__version__} written to {RECORDED}")
        return 0
    found = changes(now, recorded()["touchpoints"])
    for line in found:
        print(line)
    print(f"{len(now)} touchpoints of vLLM {vllm.__version__}: " + (f"{len(found)} changed" if found else "as recorded"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
