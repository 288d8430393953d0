"""The import direction: a module imports only from its own layer or layers above it (docs/DEVELOPING.md)."""
import ast
from pathlib import Path

import bisect_lab

PKG = Path(bisect_lab.__file__).parent

# Every top-level module or package of bisect_lab, by name (no placement by name prefix: a new
# module must be given its layer here on purpose).
LAYERS = {
    1: {"model", "errors", "paths", "verdicts", "redact", "placeholders", "jsonable", "terminal_text"},
    2: {"stats", "strategies"},
    3: {"config", "cluster_config", "patchset", "arms", "store", "store_sessions", "parsers", "summaries",
        "summaries_sessions", "nccl_log", "results", "sweepfile", "nights", "matrix"},
    4: {"hosts", "trees", "capture", "gpu", "fingerprint", "envcheck", "diffing"},
    5: {"runner", "trial", "serving", "campaigns", "fleet"},
    6: {"cli", "commands", "pytest_plugin", "report", "report_plots", "render", "render_diff", "render_recheck", "__main__", "__init__",
        "_bundled"},
}
MAX_DEPTH = 10         # levels of the import graph of the top-level units (a unit sits above all it imports)
MAX_LINES = 650        # "no module over about 600 lines"


def layer_of(top: str) -> int:
    for n, names in LAYERS.items():
        if top in names:
            return n
    raise AssertionError(f"module {top!r} has no layer in tests/test_layers.py: give it one")


def imports(path: Path, modname: list[str]):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = modname[: len(modname) - node.level]
                target = base + (node.module.split(".") if node.module else [])
                if not target:   # "from . import x" at the package root: a module, or a name of __init__
                    for alias in node.names:
                        is_module = (PKG / f"{alias.name}.py").exists() or (PKG / alias.name).is_dir()
                        yield alias.name if is_module else "__init__"
                    continue
                yield target[0]
            elif node.module and node.module.startswith("bisect_lab."):
                yield node.module.split(".")[1]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("bisect_lab."):
                    yield alias.name.split(".")[1]


def test_import_direction():
    bad = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).with_suffix("")
        parts = list(rel.parts)
        if parts[0] == "_bundled":
            continue
        top = parts[0]
        mine = layer_of(top)
        # modname relative to the package, for resolving relative imports
        modname = parts if parts[-1] != "__init__" else parts[:-1] + ["__init__"]
        for imp in imports(path, modname[:-1] + [modname[-1]]):
            if not imp or imp == top:
                continue
            theirs = layer_of(imp)
            if theirs > mine and top != "__init__":
                bad.append(f"{rel} (layer {mine}) imports {imp} (layer {theirs})")
    assert not bad, "\n".join(bad)


def test_pure_layers_do_no_io():
    """Layers 1-2 must not touch processes, files or the network."""
    forbidden = {"subprocess", "socket", "sqlite3", "fabric", "paramiko", "psutil", "pynvml", "git", "shutil"}
    bad = []
    for top in LAYERS[1] | LAYERS[2]:
        for path in list(PKG.glob(f"{top}.py")) + list((PKG / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module.split(".")[0]]
                bad += [f"{path.relative_to(PKG)} imports {n}" for n in names if n in forbidden]
    assert not bad, "\n".join(bad)


def _top_level_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG).with_suffix("").parts)
        if parts[0] == "_bundled":
            continue
        top = parts[0]
        graph.setdefault(top, set())
        if top == "__init__":        # the lazy public API: it names what it re-exports, it is not a level
            continue
        modname = parts if parts[-1] != "__init__" else parts[:-1] + ["__init__"]
        graph[top] |= {imp for imp in imports(path, modname) if imp and imp not in (top, "__init__")}
    return graph


def test_import_graph_is_at_most_ten_levels_deep():
    """The tall spine (cli -> report -> sweep -> bisection -> campaign -> runner -> ...) is gone:
    counted over the top-level units LAYERS places, the longest import chain is at most
    MAX_DEPTH modules long (function-level imports included)."""
    graph = _top_level_graph()
    depth: dict[str, int] = {}
    chain_of: dict[str, list[str]] = {}

    def walk(m: str, stack: tuple = ()) -> int:
        if m in depth:
            return depth[m]
        assert m not in stack, f"import cycle between top-level units: {' -> '.join(stack + (m,))}"
        below = [(walk(x, stack + (m,)), x) for x in graph.get(m, ())]
        best = max(below, default=(0, None))
        depth[m] = best[0] + 1
        chain_of[m] = [m] + (chain_of[best[1]] if best[1] else [])
        return depth[m]

    for m in graph:
        walk(m)
    top = max(depth, key=depth.get)
    assert depth[top] <= MAX_DEPTH, f"import graph {depth[top]} levels deep: {' -> '.join(chain_of[top])}"


def test_no_module_is_far_over_600_lines():
    long = sorted((n, str(p.relative_to(PKG))) for p in PKG.rglob("*.py")
                  if "_bundled" not in p.parts and (n := len(p.read_text().splitlines())) > MAX_LINES)
    assert not long, "modules over about 600 lines: " + ", ".join(f"{p} ({n})" for n, p in long)


def test_one_loop_drives_every_campaign_kind():
    """Only campaigns/drive.py calls strategy.ask() / executor.run_batch(): every campaign kind
    goes through drive(), so a fix to the loop (batches, fleets) reaches all of them."""
    bad = []
    for path in (PKG / "campaigns").rglob("*.py"):
        if path.name == "drive.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("ask", "run_batch"):
                bad.append(f"{path.relative_to(PKG)}:{node.lineno} calls .{node.attr}")
    assert not bad, "\n".join(bad)


def test_developing_names_every_module():
    """docs/DEVELOPING.md says what each module owns: a module it does not name fails here."""
    text = (PKG.parent / "docs" / "DEVELOPING.md").read_text()
    missing = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
                     if "_bundled" not in p.parts and p.name != "__init__.py"
                     and f"`{p.relative_to(PKG)}`" not in text)
    assert not missing, "docs/DEVELOPING.md does not name: " + ", ".join(missing)
