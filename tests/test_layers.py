"""The import direction of DESIGN 4: a module imports only from its own layer or layers above it."""
import ast
from pathlib import Path

import bisect_lab

PKG = Path(bisect_lab.__file__).parent

LAYERS = {
    1: {"model", "errors", "paths", "verdicts", "redact", "placeholders"},
    2: {"stats", "strategies"},
    3: {"config", "patchset", "arms", "store", "parsers", "summaries", "nccl_log"},
    4: {"hosts", "trees", "capture", "gpu", "fingerprint", "envcheck", "diffing"},
    5: {"runner", "campaign", "bisection", "sweep", "matrix"},
    6: {"cli", "commands", "pytest_plugin", "report", "render", "render_diff", "__main__", "__init__", "_bundled"},
}


def layer_of(top: str) -> int:
    for n, names in LAYERS.items():
        if top in names or any(top.startswith(name + "_") for name in names):
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
