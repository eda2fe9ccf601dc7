"""yaml.safe_load with bounds, for every YAML file a user hands sptune (specs, campaigns, --set values, a study's
saved spec). PyYAML shares an aliased node rather than copying it, so `a: &a [*a]` composes into a structure that
contains itself and nine nested aliases of nine items each into 387 million values in 600 bytes: harmless to
PyYAML, but every walk of the document after it (the duplicate-key check, pydantic) recurses without end or runs
for hours. The loader refuses both while composing, before anything walks the document, and caps its size and
depth, so that no input makes the reader work for more than a moment. Aliases that stay small are kept: the
shipped campaigns use them (`<<: *paper` in sweeps/lra_table.yaml)."""

from __future__ import annotations

from typing import Any

import yaml

MAX_BYTES = 1024 * 1024  # the largest shipped YAML holds 35 KB
MAX_VALUES = 20_000  # scalars, lists and mappings, each alias counted as what it repeats; a spec holds ~200
MAX_DEPTH = 32  # a spec nests 5 levels (variants.spt.search.lr.values)


class YamlBoundError(yaml.composer.ComposerError):
    """A document beyond a bound: ``problem`` says which, ``fix`` what to write instead, ``problem_mark`` where."""

    def __init__(self, problem: str, fix: str, mark: yaml.Mark | None) -> None:
        super().__init__(None, None, problem, mark)
        self.fix = fix


class BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader (the same tags and types), counting while it composes: the values the document
    expands to, how deep it nests, and which anchors are still open (an alias to one of them is a self-reference)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._values = 0
        self._depth = 0
        self._open: set[str] = set()
        self._weight: dict[str, int] = {}  # anchor -> the values its node expands to

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            return self._alias(event, parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise YamlBoundError(
                f"the document nests deeper than {MAX_DEPTH} levels here",
                "a spec nests a few levels (e.g. variants.spt.search.lr); write the values out flat",
                event.start_mark,
            )
        self._count(1, event.start_mark)
        before = self._values
        if event.anchor is not None:
            self._open.add(event.anchor)
        node = super().compose_node(parent, index)
        if event.anchor is not None:
            self._open.discard(event.anchor)
            self._weight[event.anchor] = self._values - before + 1
        self._depth -= 1
        return node

    def _alias(self, event: yaml.AliasEvent, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if event.anchor in self._open:
            raise YamlBoundError(
                f"the alias *{event.anchor} is inside the value its anchor &{event.anchor} names, so that value "
                "would contain itself",
                f"write the value out, or move the alias after the end of &{event.anchor}'s value",
                event.start_mark,
            )
        node = super().compose_node(parent, index)  # an undefined alias is PyYAML's own error
        self._count(self._weight.get(event.anchor, 1), event.start_mark, f"the alias *{event.anchor}")
        return node

    def _count(self, values: int, mark: yaml.Mark, what: str = "this value") -> None:
        self._values += values
        if self._values > MAX_VALUES:
            raise YamlBoundError(
                f"{what} makes the document expand to more than {MAX_VALUES:,} values (an alias repeats all that "
                "its anchor names, so aliases of aliases multiply)",
                "write the values out without aliases of aliases; a spec holds a few hundred values",
                mark,
            )


def compose(text: str) -> yaml.Node | None:
    """The document's node graph, within the bounds above (YamlBoundError otherwise)."""
    if len(text) > MAX_BYTES:
        raise YamlBoundError(
            f"{len(text):,} characters, more than the {MAX_BYTES:,} a spec may hold",
            "pass the spec's .yaml file (a spec is a few KB), not a data file",
            None,
        )
    loader = BoundedSafeLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def construct(node: yaml.Node | None) -> Any:
    """The Python value of a node composed by :func:`compose`, as yaml.safe_load builds it."""
    if node is None:
        return None
    loader = BoundedSafeLoader("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()


def safe_load(text: str) -> Any:
    """yaml.safe_load(text), refusing what :func:`compose` refuses."""
    return construct(compose(text))
