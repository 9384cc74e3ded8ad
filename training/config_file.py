"""Trainer settings from a YAML file (``sparring train --config FILE``), and retrain settings
with trainer settings under ``train`` (``sparring retrain --config FILE``).

The file's keys are the fields of the trainer's config (``X_config.py``), with ``lora`` a
mapping of ``LoraSettings`` (and ``lora.peft`` of further PEFT ``LoraConfig`` arguments) and,
for the TRL trainers, ``trl`` a mapping of further arguments of TRL's config class::

    learning_rate: 1e-4
    num_train_epochs: 2
    max_length: 512
    loss_type: ipo            # dpo
    lora: {r: 32, alpha: 64, target_modules: [q_proj, v_proj], peft: {use_rslora: true}}
    trl: {warmup_steps: 0.1, lr_scheduler_type: cosine}   # transformers 5: a warmup fraction below 1

Each key is checked against the trainer before anything runs: an unknown key is named with
its file and line, a close match and the valid keys; a value of the wrong type with the type
expected. The values' ranges are then checked by the config itself. ``model`` is refused: the
base model is a setting (SPARRING_MODEL), to which snapshots and adapters are tied.

A retrain file's keys are the fields of ``training.loop.RetrainConfig`` (``train_options``
excepted), and ``train`` a mapping of the trainer's settings as above, checked against the
trainer the retrain runs; there ``device`` and ``seed`` are refused as well (retrain takes
them from the settings)::

    trainer: dpo
    roles: [critic]
    every_episodes: 128
    min_rows: 32
    train: {learning_rate: 5e-5, loss_type: ipo, lora: {r: 16}}
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

REFUSED = {"model": "the base model is the SPARRING_MODEL setting, which dataset snapshots and adapters are tied to"}
RETRAIN_REFUSED = {
    **REFUSED,
    "device": "retrain trains on the SPARRING_DEVICE setting, the device its games are served on",
    "seed": "retrain seeds its trainers with the SPARRING_SEED setting, as it seeds its games",
}
"""Trainer settings a retrain file's ``train`` mapping cannot hold, and why."""
RETRAIN_TRAIN_KEY = "train"


class ConfigFileError(ValueError):
    """The settings file cannot be used; the message names the file, the line and the fix."""


def read_config_file(path: Path, config_type: type, kind: str) -> dict[str, Any]:
    """The settings in ``path`` for the ``kind`` trainer (config class ``config_type``), checked."""
    path = Path(path)
    values, lines = _read(path)
    checker = _Checker(path, f"the {kind} trainer", config_type, lines, REFUSED)
    return checker.mapping(values, _settable(config_type, REFUSED), ())


@dataclasses.dataclass(frozen=True)
class RetrainFile:
    """The settings of a ``sparring retrain --config`` file."""

    path: Path
    fields: dict[str, Any]
    """fields of the retrain config, checked"""
    train: dict[str, Any]
    """the ``train`` mapping as written: which trainer's settings they are depends on ``trainer``"""
    lines: dict[tuple[str, ...], int]

    def train_settings(self, kind: str, config_type: type) -> dict[str, Any]:
        """The ``train`` mapping checked as settings of the ``kind`` trainer (config class ``config_type``)."""
        checker = _Checker(self.path, f"the {kind} trainer", config_type, self.lines, RETRAIN_REFUSED,
                           root=(RETRAIN_TRAIN_KEY,))
        return checker.mapping(self.train, _settable(config_type, RETRAIN_REFUSED), (RETRAIN_TRAIN_KEY,))


def read_retrain_file(path: Path, retrain_type: type) -> RetrainFile:
    """The settings in ``path`` for ``sparring retrain`` (config class ``retrain_type``): its
    fields checked, its ``train`` mapping left for ``RetrainFile.train_settings``."""
    path = Path(path)
    values, lines = _read(path)
    schema = {key: hint for key, hint in _schema(retrain_type).items() if key != "train_options"}
    checker = _Checker(path, "`sparring retrain`", retrain_type, lines, REFUSED)
    fields = checker.mapping(values, {**schema, RETRAIN_TRAIN_KEY: dict}, ())
    return RetrainFile(path, fields, fields.pop(RETRAIN_TRAIN_KEY, None) or {}, lines)


def _read(path: Path) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """The mapping a YAML file holds (empty for an empty file) and the line of each of its keys."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"cannot read the settings file {path}: {exc}") from exc
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        values = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        raise ConfigFileError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from exc
    if values is None:
        return {}, {}
    if not isinstance(values, dict):
        raise ConfigFileError(f"{path}: expected a mapping of setting: value, got a {type(values).__name__}")
    return values, _lines(root)


def _settable(config_type: type, refused: Mapping[str, str]) -> dict[str, Any]:
    return {key: hint for key, hint in _schema(config_type).items() if key not in refused}


def _lines(node: yaml.Node | None, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """The line of each key of the file (nested keys by their path)."""
    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = (*prefix, str(key.value))
            lines[path] = key.start_mark.line + 1
            lines.update(_lines(value, path))
    return lines


def _schema(cls: type) -> dict[str, Any]:
    """Field name -> type of a dataclass (its init fields); ``Any`` where the types cannot be read."""
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):  # a hint naming what is not importable here: check the names only
        hints = {}
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls) if f.init}


@dataclasses.dataclass
class _Checker:
    path: Path
    subject: str
    """what the keys configure, in messages: 'the sft trainer', '`sparring retrain`'"""
    config_type: type
    lines: dict[tuple[str, ...], int]
    refused: Mapping[str, str]
    """keys of ``config_type`` that cannot be set, and why"""
    root: tuple[str, ...] = ()
    """where the settings of ``config_type`` are in the file: () at the top, ("train",) under train"""

    def mapping(self, values: Mapping[Any, Any], schema: dict[str, Any], at: tuple[str, ...],
                owner: str | None = None) -> dict[str, Any]:
        checked = {}
        for key, value in values.items():
            key = str(key)
            where = (*at, key)
            if at == self.root and key in self.refused:
                raise self.error(where, f"{'.'.join(where)!r} cannot be set here: {self.refused[key]}")
            if key not in schema:
                raise self.error(where, self._unknown(key, schema, at, owner))
            checked[key] = self.value(value, schema[key], where)
        return checked

    def value(self, value: Any, hint: Any, where: tuple[str, ...]) -> Any:
        inside = where[len(self.root):]
        if inside == ("trl",) and isinstance(value, dict):
            trl_class = self.config_type.trl_config_class()
            return self.mapping(value, _schema(trl_class), where, owner=f"TRL's {trl_class.__name__}")
        if inside[-2:] == ("lora", "peft") and isinstance(value, dict):
            from peft import LoraConfig

            return self.mapping(value, _schema(LoraConfig), where, owner="PEFT's LoraConfig")
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            return self.mapping(value, _schema(hint), where)
        coerced = _coerce(value, hint)
        if coerced is _WRONG:
            raise self.error(where, f"{'.'.join(where)!r} must be {_describe(hint)}, got {value!r} "
                                    f"({type(value).__name__})")
        return coerced

    def _unknown(self, key: str, schema: dict[str, Any], at: tuple[str, ...], owner: str | None) -> str:
        dotted = ".".join((*at, key))
        close = difflib.get_close_matches(key, schema, n=3)
        hint = f" (did you mean {' or '.join(repr('.'.join((*at, c))) for c in close)}?)" if close else ""
        if owner is not None:  # TRL's and PEFT's classes have dozens of arguments: name the class, not them all
            return f"unknown key {dotted!r}: not an argument of {owner}{hint}."
        of = f" of {'.'.join(at)}" if at else ""
        return f"unknown key {dotted!r} for {self.subject}{hint}. Valid keys{of}: {', '.join(sorted(schema))}."

    def error(self, where: tuple[str, ...], message: str) -> ConfigFileError:
        line = self.lines.get(where)
        return ConfigFileError(f"{self.path}{f', line {line}' if line else ''}: {message}")


_WRONG = object()


def _coerce(value: Any, hint: Any) -> Any:
    """``value`` as a ``hint`` (a list for a tuple, an int or a number written 1e-4 for a float),
    or ``_WRONG``. Types this cannot check (TRL's enums...) accept any value: TRL checks them."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return value
    if origin in (typing.Union, types.UnionType):
        for option in args:
            coerced = _coerce(value, option)
            if coerced is not _WRONG:
                return coerced
        return _WRONG
    if hint is type(None):
        return None if value is None else _WRONG
    if hint is bool:
        return value if isinstance(value, bool) else _WRONG
    if hint is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _WRONG
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                return _WRONG
            return number if math.isfinite(number) else _WRONG
        return _WRONG
    if hint is str:
        return value if isinstance(value, str) else _WRONG
    if origin in (tuple, list) or hint in (tuple, list):
        if not isinstance(value, list):
            return _WRONG
        item = args[0] if args else Any
        items = [_coerce(v, item) for v in value]
        return _WRONG if any(i is _WRONG for i in items) else (tuple(items) if origin is tuple else items)
    if origin is dict or hint is dict:
        return value if isinstance(value, dict) else _WRONG
    if typing.get_origin(hint) is typing.Literal:
        return value if value in args else _WRONG
    return value


_PLURAL = {str: "strings", int: "integers", float: "numbers"}


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin in (tuple, list):
        return f"a list of {_PLURAL.get(args[0], _describe(args[0])) if args else 'values'}"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null",
             dict: "a mapping"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))
