"""The packages' shape: the harness is one installed import name whose dependencies point one way; the
engine patch is a distribution of its own that imports none of it; the console scripts work."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dspark_bench"
# Each part may import only the parts after it in this list (and itself).
ENGINE = ROOT / "engine"  # the dspark-serve distribution
LAYERS = ["cli", "reports", "store", "loadtests", "scenarios"]
SHARED = {"dspark_bench.files"}  # the one YAML loader, beneath every part


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node, less the bodies of ``if TYPE_CHECKING:`` (imports for annotations only)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            continue
        yield node
        yield from _runtime_nodes(node)


def _imports(path: Path, type_only_too: bool = False, of: str = "dspark_bench") -> set[str]:
    """Every module of package ``of`` a file imports at run time, wherever the import statement sits (and,
    with ``type_only_too``, under ``if TYPE_CHECKING:`` as well)."""
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree) if type_only_too else _runtime_nodes(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == of:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == of}
    return found


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _graph(type_only_too: bool = False) -> dict[str, set[str]]:
    return {_module_name(p): _imports(p, type_only_too) for p in PACKAGE.rglob("*.py")}


def test_parts_depend_one_way():
    wrong = []
    for module, imported in _graph().items():
        mine = _part(module)
        if mine not in LAYERS:
            continue
        allowed = set(LAYERS[LAYERS.index(mine) :])
        for target in imported - SHARED:
            if _part(target) not in allowed:
                wrong.append(f"{module} -> {target}")
    assert not wrong, f"imports against the layering {LAYERS}: {wrong}"


def test_engine_patch_and_its_tests_import_nothing_of_the_harness():
    sources = [*(ENGINE / "dspark_serve").rglob("*.py"), *(ROOT / "tests" / "unit").glob("test_engine_patch_*.py")]
    assert len(sources) > 20
    leaks = {f"{p.relative_to(ROOT)} -> {m}" for p in sources for m in _imports(p, type_only_too=True)}
    assert not leaks


def test_the_harness_imports_nothing_of_the_engine_patch():
    """It starts dspark-serve as a process for local DSpark arms, and needs it for nothing else."""
    leaks = {f"{p.relative_to(ROOT)} -> {m}" for p in PACKAGE.rglob("*.py") for m in _imports(p, True, of="dspark_serve")}
    assert not leaks


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    graph = {m: {t for t in targets if t in graph} for m, targets in graph.items()}
    visiting, done, cycles = set(), set(), []

    def visit(node: str, path: list[str]) -> None:
        if node in visiting:
            cycles.append(" -> ".join([*path[path.index(node) :], node]))
            return
        if node in done:
            return
        visiting.add(node)
        for target in graph.get(node, ()):
            if target != node and not node.startswith(target + "."):  # a package importing its own children
                visit(target, [*path, node])
        visiting.discard(node)
        done.add(node)

    for module in graph:
        visit(module, [])
    return cycles


def test_no_import_cycles_between_modules_not_even_for_type_annotations(tmp_path):
    graph = _graph(type_only_too=True)
    assert not _cycles(graph)
    # the check sees a cycle that exists only for annotations (arms and config once imported each other so)
    old = {**graph, "dspark_bench.loadtests.arms": graph["dspark_bench.loadtests.arms"] | {"dspark_bench.loadtests.config"}}
    assert _cycles(old) and "dspark_bench.loadtests.config" in _cycles(old)[0]
    edited = tmp_path / "arms.py"  # and reads such an import from a file
    edited.write_text("if TYPE_CHECKING:\n    from dspark_bench.loadtests.config import RunConfig\n", encoding="utf-8")
    assert _imports(edited, type_only_too=True) == {"dspark_bench.loadtests.config"} and not _imports(edited)


def _graph_keys() -> set[str]:
    return {_module_name(p) for p in PACKAGE.rglob("*.py")}


def test_the_record_flows_one_way():
    """plan -> user -> record -> results -> report: nothing upstream imports what comes after it."""
    graph = _graph()
    flow = ["records", "plan", "user", "results"]
    for index, name in enumerate(flow):
        later = {f"dspark_bench.loadtests.{n}" for n in flow[index + 1 :]} | {"dspark_bench.loadtests.sweep"}
        assert not graph[f"dspark_bench.loadtests.{name}"] & later, name


def _wheel(source: Path, name: str, into: Path) -> tuple[list[str], str, str]:
    """(file names, entry_points.txt, METADATA) of ``source``'s wheel."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(into), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = zipfile.ZipFile(next(into.glob(f"{name}-*.whl")))
    names = wheel.namelist()
    entry_points = wheel.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    return names, entry_points, wheel.read(next(n for n in names if n.endswith("METADATA"))).decode()


def _top(names: list[str]) -> set[str]:
    return {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}


def test_the_harness_wheel_installs_one_import_name_and_no_vllm_plugin(tmp_path):
    names, entry_points, _ = _wheel(ROOT, "dspark_bench", tmp_path)
    assert _top(names) == {"dspark_bench"}
    assert "dspark_bench/loadtests/locustfile.py" in names and "dspark_bench/scenarios/defs/order_extraction.yaml" in names
    assert "dspark-bench = dspark_bench.cli:main" in entry_points
    assert "vllm.general_plugins" not in entry_points and "dspark-serve" not in entry_points


def test_the_engine_patch_wheel_stands_alone(tmp_path):
    """dspark-serve: its one import name, its command and vLLM plugin, its recorded fingerprints, and none of
    the harness's dependencies."""
    names, entry_points, metadata = _wheel(ENGINE, "dspark_serve", tmp_path)
    assert _top(names) == {"dspark_serve"}
    assert "dspark_serve/vllm_fingerprints.json" in names and "dspark_serve/targets/scheduler.py" in names
    assert "dspark-serve = dspark_serve.serve:main" in entry_points
    assert "dspark = dspark_serve.engine_plugin:register" in entry_points
    required = [line.split(":", 1)[1].strip().lower() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    harness_only = ("locust", "pandas", "sqlalchemy", "matplotlib", "jsonschema", "psycopg", "geventhttpclient")
    assert required and not [r for r in required if r.startswith(harness_only)], required


@pytest.mark.parametrize("command", [["bench", "--help"], ["--help"], ["gate", "--help"]])
def test_console_script_help(command):
    script = Path(sys.executable).with_name("dspark-bench")
    out = subprocess.run([str(script), *command], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "usage: dspark-bench" in out.stdout
