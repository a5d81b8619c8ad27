"""The floor plan (docs/architecture.md): every import points down the layers, every module says
what it owns, no function is longer than a screen."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "addrsim"
LAYERS = {"errors": 0, "files": 0, "__init__": 0, "__main__": 9, "ir": 1, "backends": 2, "isa": 3, "loader": 3, "engine": 4,
          "model": 5, "prove": 6, "emu": 6, "report": 7, "api": 8, "commands": 9}
GPU_MAY_IMPORT = {"addrsim.model.layout", "addrsim.gpu"}      # the GPU runner needs PyTorch and this only
MAX_LINES = 80


def modules():
    return sorted(p for p in ROOT.rglob("*.py"))


def _layer_of(dotted: str):
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(tree):
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("addrsim"):
            if n.module == "addrsim":
                yield from (f"addrsim.{a.name}" if a.name != "__version__" else "addrsim" for a in n.names)
            else:
                yield n.module
        elif isinstance(n, ast.Import):
            yield from (a.name for a in n.names if a.name.startswith("addrsim"))


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path):
    rel = path.relative_to(ROOT)
    top = rel.parts[0].removesuffix(".py")
    tree = ast.parse(path.read_text())
    for mod in _imports(tree):
        if top == "gpu":
            assert any(mod == g or mod.startswith(g + ".") for g in GPU_MAY_IMPORT), (rel, mod)
            continue
        target = _layer_of(mod)
        if target == "gpu":
            assert top == "commands", (rel, mod)      # only the cross-check command drives the runner
            continue
        assert LAYERS[target] <= LAYERS[top], f"{rel} (layer {top}) imports {mod} (layer {target})"


def test_the_emulator_never_reads_the_prover():
    """addrsim/emu is an independent check: it imports no module of the prover's engine,
    models' extraction or proofs (issue 37)."""
    for path in (ROOT / "emu").glob("*.py"):
        for mod in _imports(ast.parse(path.read_text())):
            assert not mod.startswith(("addrsim.engine", "addrsim.prove")), f"{path.name} imports {mod}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_says_what_it_owns(path):
    doc = ast.get_docstring(ast.parse(path.read_text()))
    if path.name == "__main__.py":
        return
    assert doc and "TODO" not in doc and len(doc) > 40, path


def test_no_function_longer_than_a_screen():
    long = []
    for path in modules():
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_LINES:
                long.append(f"{path.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)")
    assert long == []


def test_the_layer_test_can_fail(tmp_path):
    """A lower layer importing a higher one is caught."""
    bad = ast.parse("from addrsim.prove.check import check\n")
    assert LAYERS[_layer_of(next(_imports(bad)))] > LAYERS["ir"]
