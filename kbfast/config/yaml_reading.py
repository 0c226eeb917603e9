"""Read YAML files safely: UTF-8 text, PyYAML's SafeLoader with caps on nesting, aliases and values (an alias
bomb is refused before it expands), and refusals of a key given twice, a float that overflows to infinity and a
whole number too long to read.  Every problem is a ``ConfigError`` naming the file."""

from __future__ import annotations

import math
from typing import Any

import yaml

from kbfast.errors import ConfigError


def read_text(path: Any, label: str) -> str:
    """The text of a YAML file, which must be UTF-8; anything else is a ConfigError naming the first bad byte."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(label, "<file>", str(path), f"cannot read the file ({err.strerror or err})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ConfigError(label, "<file>", f"byte 0x{raw[err.start]:02x} at line {line}",
                          "not UTF-8 text", "save the file as UTF-8 (most editors: 'Save with encoding')") from None


MAX_YAML_DEPTH = 64             # nesting levels of a YAML file (a description has fewer than 10)
MAX_YAML_ALIASES = 1_000        # alias references (*name) in a YAML file
MAX_YAML_VALUES = 1_000_000     # values a YAML file holds with its aliases expanded (an alias bomb holds billions)
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"


class _CappedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, refusing (ConfigError naming ``label``) a file nested deeper than MAX_YAML_DEPTH
    levels (PyYAML would recurse into a RecursionError) or with more than MAX_YAML_ALIASES alias references."""

    def __init__(self, text: str, label: str) -> None:
        super().__init__(text)
        self.label, self.depth, self.aliases = label, 0, 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_YAML_ALIASES:
                raise ConfigError(self.label, f"line {line}", f"*{event.anchor}",
                                  f"more than {MAX_YAML_ALIASES:,} alias references",
                                  "write the values out; aliases are refused beyond this limit")
            return super().compose_node(parent, index)
        self.depth += 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                raise ConfigError(self.label, f"line {line}", None, f"nested more than {MAX_YAML_DEPTH} levels "
                                  "deep", "a description nests a few levels; check the brackets")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _expanded_size(label: str, node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values ``node`` holds once its aliases are expanded (``sizes``: memo by node id, so a shared
    node is counted in one visit however often it is referred to); a value that contains itself is refused."""
    known = sizes.get(id(node))
    if known is not None:
        if known < 0:
            raise ConfigError(label, f"line {node.start_mark.line + 1}", None,
                              "an alias refers to a value that contains it", "write the value out")
        return known
    sizes[id(node)] = -1   # in progress
    n = 1
    if isinstance(node, yaml.MappingNode):
        n += sum(_expanded_size(label, k, sizes) + _expanded_size(label, v, sizes) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        n += sum(_expanded_size(label, item, sizes) for item in node.value)
    sizes[id(node)] = n
    return n


def _check_nodes(label: str, node: yaml.Node, path: str = "", seen: set[int] | None = None) -> None:
    """Refuse a mapping that gives a key twice (YAML would keep the last one silently), a float that
    overflows to infinity (``1.0e+400``; ``.inf`` is written as such) and a whole number too long to read."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _FLOAT_TAG and "inf" not in node.value.lower() and "nan" not in node.value.lower():
            try:
                overflow = math.isinf(float(node.value.replace("_", "")))
            except ValueError:   # sexagesimal 1:30.5, which PyYAML reads itself
                overflow = False
            if overflow:
                raise ConfigError(label, path or "<root>", node.value, "the number is too large: it would become "
                                  "infinity", "write a smaller number (inf, written .inf, is allowed only where "
                                  "it means no serialization: link.<class>.bw_gbs)")
        elif node.tag == _INT_TAG and len(node.value) > 1000:
            raise ConfigError(label, path or "<root>", node.value, f"a whole number of {len(node.value):,} "
                              "characters is too large", "counts and sizes have at most a dozen digits")
    elif isinstance(node, yaml.MappingNode):
        lines: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            if key.tag == "tag:yaml.org,2002:merge":
                continue
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else yaml.serialize(key).strip()
            where = f"{path}.{name}" if path else name
            line = key.start_mark.line + 1
            if (key.tag, name) in lines:
                raise ConfigError(label, where, None,
                                  f"the key is given twice, on lines {lines[key.tag, name]} and {line}",
                                  "keep one of them (YAML would silently use the last)")
            lines[key.tag, name] = line
            _check_nodes(label, value, where, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_nodes(label, item, f"{path}.{i}" if path else str(i), seen)


def load_yaml(label: str, text: str) -> Any:
    """The value a YAML text holds, read with the checks of :func:`parse_yaml` (any root); a limit or a check
    that fails is a ConfigError naming ``label``, bad YAML a ``yaml.YAMLError``."""
    loader = _CappedLoader(text, label)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        values = _expanded_size(label, node, {})
        if values > MAX_YAML_VALUES:
            raise ConfigError(label, "<yaml>", None, f"the file holds {values:,} values with its aliases expanded, "
                              f"more than the limit of {MAX_YAML_VALUES:,}",
                              "an alias repeated inside aliases multiplies; write the values out")
        _check_nodes(label, node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error on one line, its place in the file's terms: ``expected ',' or ']', but got '<stream end>' at
    line 2, column 1 (in the flow sequence from line 1, column 6)`` (PyYAML writes five lines, the text it read
    as ``"<unicode string>"``, and a caret under a copy of the line)."""
    problem = getattr(err, "problem", None)
    if problem is None:
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    at = getattr(err, "problem_mark", None)
    text = problem + (f" at line {at.line + 1}, column {at.column + 1}" if at is not None else "")
    context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
    if context:
        text += f" ({context.removeprefix('while ')}" + (
            f" from line {start.line + 1}, column {start.column + 1}" if start is not None else "") + ")"
    return text


def parse_yaml(label: str, text: str, what: str = "topology") -> dict[str, Any]:
    """The mapping a ``what`` file holds; bad YAML, a key given twice, another root, or a file beyond the caps
    (nesting, aliases, values with aliases expanded) is a ConfigError naming ``label``."""
    try:
        data = load_yaml(label, text)
    except yaml.YAMLError as err:
        raise ConfigError(label, "<yaml>", None, f"not valid YAML: {yaml_problem(err)}",
                          "check the brackets, quotes and indentation around that line") from None
    if not isinstance(data, dict):
        raise ConfigError(label, "<root>", data, f"a {what} file must be a mapping")
    return data
