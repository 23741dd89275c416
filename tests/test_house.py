"""The house keeps its shape: imports between the package's top-level folders flow one way (every import counted,
lazy ones inside functions included), the runner stays pure tensor code, no module reaches into another package's
private names, and the top level holds a handful of modules."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "eagle_convert"
TOP_LEVEL_MODULES = {"__init__", "__main__", "api", "errors", "kinds", "spec"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> list[tuple[str, str, str]]:
    """(importing module, imported module, imported name or "") for every import of the package, anywhere."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
                for alias in node.names:
                    found.append((module, target or "", alias.name))
            elif isinstance(node, ast.Import):
                found.extend((module, alias.name, "") for alias in node.names)
    return [(a, b, n) for a, b, n in found if b == "eagle_convert" or b.startswith("eagle_convert.")]


def room(module: str, name: str = "") -> str:
    """The top-level folder or module a dotted name belongs to (`from eagle_convert import api`: api)."""
    parts = module.split(".")[1:] or [name]
    return parts[0]


def package_graph(edges) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for source, target, name in edges:
        a, b = room(source), room(target, name)
        if a != b and b not in ("__init__", "__version__"):
            graph.setdefault(a, set()).add(b)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one room (Tarjan)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_cycle():  # negative control: the check below can fail
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles(package_graph([("eagle_convert.runner.x", "eagle_convert.engines.y", "f"),
                                 ("eagle_convert.engines.y", "eagle_convert.runner", "g")])) == [["engines", "runner"]]


def test_no_package_cycle_over_every_import():
    assert cycles(package_graph(imports())) == []


def test_the_runner_imports_nothing_above_it():
    above = {"engines", "benchmark", "cli", "api", "conversion", "inspection"}
    assert [(a, b) for a, b, n in imports() if room(a) == "runner" and room(b, n) in above] == []


def test_no_private_name_of_another_package_is_imported():
    private = [(a, b, n) for a, b, n in imports()
               if n.startswith("_") and not n.startswith("__") and room(a) != room(b, n)]
    assert private == []


def test_the_top_level_holds_a_handful_of_modules():
    assert {p.stem for p in PACKAGE.glob("*.py")} <= TOP_LEVEL_MODULES


# The command line talks to the library through one door: api.py (cheap to import; torch loads behind it), plus
# the settings it declares its options with and the typed errors it turns into exit codes.
CLI_MAY_IMPORT = {"cli", "api", "settings", "errors", "__init__", "__version__"}


def rooms_imported_by(room_name: str, edges) -> set[str]:
    return {room(b, n) for a, b, n in edges if room(a) == room_name}


def test_the_cli_imports_only_the_api_settings_and_errors():
    assert rooms_imported_by("cli", imports()) - CLI_MAY_IMPORT == set()


def test_the_door_check_sees_a_side_entrance():  # negative control: a lazy import of another room is caught
    edges = [("eagle_convert.cli.bench", "eagle_convert.benchmark.api", "run"),
             ("eagle_convert.cli.main", "eagle_convert", "api")]
    assert rooms_imported_by("cli", edges) - CLI_MAY_IMPORT == {"benchmark"}
