"""Every private transformers name lade reaches goes through lade/compat.py, read from lade/'s syntax trees.

A name is taken as transformers' when it begins with one underscore (not a dunder) and lade does not define it, or
when a transformers class lade uses defines it; torch's own private names (reached from `torch.`) are not
transformers'. lade's CPU packing (lade/cpu_linear.py) swaps the class of torch's nn.Linear modules, which is the
one `__class__` assignment allowed outside compat.
"""

import ast
from pathlib import Path

import transformers
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, EncoderDecoderCache

ROOT = Path(__file__).resolve().parents[2]
LADE = ROOT / "lade"
COMPAT = LADE / "compat.py"
CLASS_SWAP_ALLOWED = {LADE / "cpu_linear.py"}  # swaps torch's nn.Linear for lade's PackedLinear, not transformers'
TORCH_PRIVATE = {"_version"}  # torch.Tensor._version (a tensor's in-place version counter, lade/cpu_linear.py)
REFLECTION = {"getattr", "setattr", "hasattr", "delattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def transformers_privates() -> set[str]:
    """The private names of the transformers classes lade works with."""
    classes = (transformers.PreTrainedModel, transformers.GenerationMixin, transformers.PretrainedConfig,
               transformers.GenerationConfig, Cache, DynamicCache, DynamicLayer, EncoderDecoderCache)
    names = {name for cls in classes for name in dir(cls)}
    names |= set(vars(transformers.PretrainedConfig()))
    return {name for name in names if _private(name)}


def lade_defined(trees: list[ast.AST]) -> set[str]:
    """Private names lade defines: its functions, classes, module and class attributes, and `self.` attributes."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _base(node) in ("self", "cls"):
                names.add(node.attr)
    return {name for name in names if _private(name)}


def _base(node: ast.AST) -> str | None:
    """The name an attribute chain starts from (`torch` for torch.ops.aten._x), None for calls and the like."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def violations(source: str, own: set[str], theirs: set[str], class_swap_allowed: bool = False) -> list[str]:
    """Each use of a private transformers name, import or `__class__` assignment in `source`, with its line."""
    found = []

    def theirs_name(name: str, base: str | None) -> bool:
        if not _private(name) or base in ("self", "cls", "torch") or name in TORCH_PRIVATE:
            return False
        return name not in own or name in theirs

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            if node.attr == "__class__" and isinstance(node.ctx, ast.Store) and not class_swap_allowed:
                found.append(f"line {node.lineno}: assigns __class__")
            elif theirs_name(node.attr, _base(node.value)):
                found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REFLECTION \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str):
            name = node.args[1].value
            if name == "__class__" and node.func.id == "setattr" and not class_swap_allowed:
                found.append(f"line {node.lineno}: setattr __class__")
            elif theirs_name(name, _base(node.args[0])):
                found.append(f"line {node.lineno}: {node.func.id}(..., {name!r})")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformers":
            parts = node.module.split(".") + [alias.name for alias in node.names]
            if any(_private(part) for part in parts):
                found.append(f"line {node.lineno}: from {node.module} import a private name")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "transformers" and any(_private(part) for part in parts):
                    found.append(f"line {node.lineno}: import {alias.name}")
    return found


def _lade_files() -> list[Path]:
    return sorted(LADE.rglob("*.py"))


def test_transformers_internals_only_in_compat():
    """lade.compat is the one module to change when a transformers release moves an internal: any other module that
    reaches one breaks silently on that release."""
    files = _lade_files()
    own = lade_defined([ast.parse(path.read_text()) for path in files])
    theirs = transformers_privates()
    found = {str(path.relative_to(ROOT)): v for path in files if path != COMPAT
             for v in [violations(path.read_text(), own, theirs, path in CLASS_SWAP_ALLOWED)] if v}
    assert not found, f"move these into lade/compat.py: {found}"


def test_the_check_sees_each_kind_of_internal():
    """Each way of reaching an internal is caught; lade's own privates and torch's are not."""
    own, theirs = {"_mine"}, {"_sample"}
    caught = ["out = type(model)._sample(model)", "layer.__class__ = SlotLayer", "setattr(layer, '__class__', X)",
              "name = getattr(config, '_name_or_path', '')", "from transformers.utils import _private_helper",
              "from transformers._private import thing", "import transformers.models._x", "x = config._attn_impl"]
    for source in caught:
        assert violations(source, own, theirs), source
    allowed = ["self._mine = 1", "x = other._mine", "torch.ops.aten._flash(q)", "w._version", "self._sample()",
               "module.__class__ = Packed"]
    assert not violations("\n".join(allowed[:-1]), own, theirs)
    assert not violations(allowed[-1], own, theirs, class_swap_allowed=True)
