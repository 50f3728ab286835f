"""Device profiles (format ``poet-profile/1``): schema, validation, loading, listing.

A profile is a JSON file describing one device well enough for the cost model
(:mod:`poet_compiler.devices.cost_model`) to price every node of a training graph:
memory sizes, per op class compute roofs and energy, memory bandwidth, paging
(flash/SD) latency, bandwidth and power, static power, and whether paging overlaps
compute (DMA). Units live in the field names (``_bytes``, ``_s``, ``_j``, ``_w``,
``_bps`` = bytes per second, ``_flops`` = FLOP per second, ``_hz``).

Every number must cite where it comes from: the ``sources`` map goes from a field path
(``"page_in.latency_s"``, ``"compute.conv.throughput_flops"``) to a citation, and a
citation of a group (``"page_in"``, ``"compute"``) covers every number inside it. A
profile with an uncited number, or a citation of a field that does not exist, is
refused — so the provenance of each figure stays checkable as profiles are edited.

Power figures are *increments above static power*: ``static_power_w`` is drawn for the
whole step (the CostTable's ``static_w``); ``energy_j_per_flop``, ``energy_j_per_byte``
and paging ``power_w`` are the extra energy of doing the work.

Bad files raise :class:`~poet_compiler.errors.ProfileError` with one line naming the
file and the field path.
"""

from __future__ import annotations

import difflib
import json
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from poet_compiler.errors import ProfileError
from poet_compiler.fileio import atomic_write_text

FORMAT = "poet-profile/1"
SCHEMA_FILE = "schema.json"

CitationKind = Literal["datasheet", "paper", "measurement", "benchmark", "estimate", "derived"]


class _Strict(BaseModel):
    # strict: no "10" -> 10 coercion (a string where a number belongs is a unit mistake);
    # JSON integers are still accepted for float fields, which pydantic allows in strict mode.
    model_config = ConfigDict(extra="forbid", strict=True)


class Citation(_Strict):
    """Where a figure comes from: the kind of source and a reference a reader can follow."""

    kind: CitationKind
    ref: str = Field(min_length=3, description="document/section, paper/table, or measurement procedure")


class OpClassFigures(_Strict):
    """Compute roof, dynamic energy and (optionally) fixed time of one op class."""

    throughput_flops: float = Field(gt=0, description="sustained FLOP per second (the compute roof)")
    energy_j_per_flop: float = Field(ge=0, description="dynamic energy per FLOP, J (above static power)")
    op_overhead_s: float | None = Field(
        default=None, ge=0,
        description="fixed time of one node of this class (call, set-up, a kernel's own fixed work); "
        "the profile's op_overhead_s when absent",
    )


class ComputeFigures(_Strict):
    """Per op class figures; the classes are the IR's ``OpClass`` values."""

    conv: OpClassFigures
    matmul: OpClassFigures
    elementwise: OpClassFigures
    norm: OpClassFigures
    reduction: OpClassFigures
    data: OpClassFigures
    other: OpClassFigures


class MemoryFigures(_Strict):
    """Main-memory roof: bandwidth and dynamic energy of memory traffic."""

    bandwidth_bps: float = Field(gt=0, description="sustained RAM bandwidth, bytes per second")
    energy_j_per_byte: float = Field(ge=0, description="dynamic energy per byte read or written, J")


class PagingFigures(_Strict):
    """One paging direction (RAM -> flash/SD or back): cost = latency + sectors / bandwidth."""

    latency_s: float = Field(ge=0, description="fixed cost of one transfer, seconds")
    bandwidth_bps: float = Field(gt=0, description="sustained transfer rate, bytes per second")
    power_w: float = Field(ge=0, description="power drawn while transferring, W (above static)")


class OpTableEntry(_Strict):
    """Measured cost of one op signature; overrides the analytic model for matching nodes."""

    compute_s: float = Field(gt=0)
    compute_j: float = Field(ge=0, description="dynamic energy, J (static power is added separately)")


class ReserveFigures(_Strict):
    """RAM the device runtime keeps for itself beside the schedule's arena and the model's
    arrays (parameters, gradients, optimizer state, batch, outputs), measured on the built
    firmware (``make measure-reserve``). A graph of ``n`` nodes reserves
    ``stack_bytes + state_bytes + per_node_bytes * n``."""

    stack_bytes: int = Field(ge=0, description="the stack region the firmware's linker script reserves, bytes")
    stack_high_water_bytes: int = Field(
        ge=0, description="the deepest stack use measured (painted stack, under QEMU), bytes; stack_bytes is sized "
                          "from it with a margin")
    state_bytes: int = Field(
        ge=0, description="runtime state, C library and driver statics: .data + .bss that are not the model's "
                          "arrays nor per node, bytes")
    per_node_bytes: int = Field(
        ge=0, description="bytes per graph node: the runtime's where table and the driver's profiling counters")

    def bytes_for(self, n_nodes: int) -> int:
        """The reserve of a graph of ``n_nodes`` nodes."""
        return self.stack_bytes + self.state_bytes + self.per_node_bytes * n_nodes


class Measurement(_Strict):
    """How a measured profile (``poetc profile``) was obtained."""

    tool: str
    energy_from: Literal["rapl", "power-w"] = Field(
        description="'rapl': /sys/class/powercap counters; 'power-w': a power figure the user gave"
    )
    torch_version: str
    threads: int = Field(ge=1)
    page_file_dir: str
    model: str | None = None


class DeviceProfile(_Strict):
    """One device. See the module docstring for units and the ``sources`` rule."""

    format: Literal["poet-profile/1"]
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str
    ram_bytes: int = Field(gt=0, description="RAM available to training, bytes (the default --ram)")
    flash_bytes: int = Field(gt=0, description="flash / SD / disk available for paging, bytes")
    page_size_bytes: int = Field(ge=1, description="paging granularity (sector/block): transfers round up to it")
    clock_hz: float | None = Field(default=None, gt=0, description="CPU (or accelerator) clock; informative")
    compute: ComputeFigures
    memory: MemoryFigures
    op_overhead_s: float = Field(
        gt=0, description="fixed time of running any node (call/dispatch/launch); the floor that keeps no node free"
    )
    page_in: PagingFigures
    page_out: PagingFigures
    static_power_w: float = Field(ge=0, description="power drawn for the whole step regardless of work, W")
    dma: bool = Field(description="paging transfers overlap compute")
    op_table: dict[str, OpTableEntry] = Field(default_factory=dict, description="measured costs keyed by op signature")
    reserve: ReserveFigures | None = Field(
        default=None, description="RAM the device runtime keeps for itself (stack, state), counted against --ram")
    measurement: Measurement | None = None
    sources: dict[str, Citation]

    @model_validator(mode="after")
    def _every_number_cited(self) -> DeviceProfile:
        data = self.model_dump(exclude={"sources"})
        paths = set(_all_paths(data))
        # 'measurement' is metadata about how a profile was made (thread count...), not a device figure
        numeric = sorted(
            p for p, v in leaves(data)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not p.startswith("measurement.")
        )
        for key in sorted(self.sources):
            if key not in paths:
                hint = difflib.get_close_matches(key, sorted(paths), n=1)
                raise ValueError(
                    f"sources[{key!r}] cites a field that does not exist"
                    + (f" (did you mean {hint[0]!r}?)" if hint else "")
                )
        for path in numeric:
            if not any(prefix in self.sources for prefix in _prefixes(path)):
                raise ValueError(f"{path} has no citation: add sources[{path!r}] (or cite an enclosing group)")
        return self

    def citation(self, path: str) -> Citation | None:
        """The citation covering ``path`` (the most specific one), or None."""
        for prefix in reversed(_prefixes(path)):
            if prefix in self.sources:
                return self.sources[prefix]
        return None


# ---- paths inside a profile --------------------------------------------------------------
def leaves(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        out: list[tuple[str, Any]] = []
        for k, v in obj.items():
            out.extend(leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return [(prefix, obj)]


def _all_paths(obj: Any, prefix: str = "") -> list[str]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(_all_paths(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _prefixes(path: str) -> list[str]:
    """'a.b.c' -> ['a', 'a.b', 'a.b.c'] (op-table keys may contain dots: still fine)."""
    parts = path.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


# ---- error messages ------------------------------------------------------------------------
_UNITS = {
    "_bps": "bytes per second",
    "_bytes": "bytes",
    "_flops": "FLOP per second",
    "_j_per_flop": "joules per FLOP",
    "_j_per_byte": "joules per byte",
    "_hz": "hertz",
    "_s": "seconds",
    "_j": "joules",
    "_w": "watts",
}


def _unit_of(field: str) -> str | None:
    for suffix in sorted(_UNITS, key=len, reverse=True):
        if field.endswith(suffix):
            return _UNITS[suffix]
    return None


def _field_names(model: type[BaseModel] = DeviceProfile) -> set[str]:
    """Every field name of the schema, for 'did you mean' hints on unknown keys."""
    names: set[str] = set()
    stack: list[type[BaseModel]] = [model]
    seen: set[type[BaseModel]] = set()
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        for name, info in m.model_fields.items():
            names.add(name)
            for sub in _submodels(info.annotation):
                stack.append(sub)
    return names


def _submodels(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [s for arg in getattr(annotation, "__args__", ()) for s in _submodels(arg)]


def _describe(exc: ValidationError) -> str:
    """The first pydantic error as '<field.path>: <what is wrong>'."""
    # An unknown key first: a misspelled key also shows up as the real one "missing",
    # and the misspelling is what the user must fix.
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    loc = [str(k) if not isinstance(k, int) else f"[{k}]" for k in err["loc"]]
    path = ".".join(loc).replace(".[", "[") or "(top level)"
    kind = err["type"]
    last = str(err["loc"][-1]) if err["loc"] else ""
    if kind == "extra_forbidden":
        hint = difflib.get_close_matches(last, sorted(_field_names()), n=1, cutoff=0.6)
        unit = (
            f"; units are fixed by the field name ({hint[0]!r} is in {_unit_of(hint[0])})"
            if hint and _unit_of(hint[0])
            else ""
        )
        return f"{path}: unknown key" + (f" (did you mean {hint[0]!r}?{unit})" if hint else "")
    if kind == "missing":
        return f"{path}: required field is missing"
    if kind in ("float_type", "int_type", "int_from_float", "bool_type") and isinstance(err.get("input"), str):
        field_unit = _unit_of(last)
        return (
            f"{path}: expected a number"
            + (f" in {field_unit} (the unit is in the field name)" if field_unit else "")
            + f", got the string {err['input']!r}"
        )
    if kind in ("greater_than", "greater_than_equal"):
        return f"{path}: {err['msg'].lower()}, got {err.get('input')!r}"
    if kind == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    return (
        f"{path}: {err['msg']} (got {err.get('input')!r})"
        if "input" in err and not isinstance(err.get("input"), dict)
        else f"{path}: {err['msg']}"
    )


# ---- loading -------------------------------------------------------------------------------
def profile_from_dict(data: Any, source: str = "profile") -> DeviceProfile:
    """Validate parsed JSON as a profile; errors name ``source`` and the field path."""
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: expected a JSON object with \"format\": \"{FORMAT}\"")
    if data.get("format") != FORMAT:
        raise ProfileError(f"{source}: format: must be {FORMAT!r}, got {data.get('format')!r}")
    try:
        return DeviceProfile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(f"{source}: {_describe(exc)}") from None


def profile_from_json(text: str, source: str = "profile") -> DeviceProfile:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{source}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    return profile_from_dict(data, source)


def _shipped_dir() -> Path:
    """The ``profiles`` package directory (shipped as package data)."""
    return Path(str(resources.files("profiles")))


def list_profiles() -> list[str]:
    """Names of the shipped profiles, sorted (``schema.json`` is not a profile)."""
    return sorted(p.stem for p in _shipped_dir().glob("*.json") if p.name != SCHEMA_FILE)


def load_profile(name_or_path: str | Path) -> DeviceProfile:
    """Load a shipped profile by name (``m4``) or any profile file by path."""
    text_name = str(name_or_path)
    looks_like_path = (
        isinstance(name_or_path, Path) or text_name.endswith(".json") or "/" in text_name or "\\" in text_name
    )
    if looks_like_path:
        path = Path(name_or_path)
    else:
        path = _shipped_dir() / f"{text_name}.json"
        if not path.is_file() or text_name == Path(SCHEMA_FILE).stem:
            known = ", ".join(list_profiles())
            raise ProfileError(f"unknown device {text_name!r} (known: {known}; or give the path of a profile .json)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc  # a UnicodeDecodeError has no strerror
        raise ProfileError(f"{path}: cannot read ({exc.__class__.__name__}: {reason})") from None
    return profile_from_json(text, str(path))


def dumps_profile(profile: DeviceProfile) -> str:
    """Deterministic JSON text of a profile (field order of the schema, op table sorted)."""
    data = profile.model_dump(mode="json", exclude_none=True)
    data["op_table"] = dict(sorted(data.get("op_table", {}).items()))
    if not data["op_table"]:
        del data["op_table"]
    data["sources"] = dict(sorted(data["sources"].items()))
    return json.dumps(data, indent=2) + "\n"


def write_profile(profile: DeviceProfile, path: str | Path) -> None:
    atomic_write_text(path, dumps_profile(profile))


# ---- JSON Schema ---------------------------------------------------------------------------
def schema_text() -> str:
    """The JSON Schema of ``poet-profile/1`` as shipped in ``profiles/schema.json``."""
    schema = DeviceProfile.model_json_schema()
    schema["$id"] = "https://poetc/profiles/schema.json"
    schema["title"] = f"poetc device profile ({FORMAT})"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def write_schema(path: str | Path | None = None) -> Path:
    """Regenerate ``profiles/schema.json`` (or write the schema to ``path``)."""
    target = Path(path) if path is not None else _shipped_dir() / SCHEMA_FILE
    atomic_write_text(target, schema_text())
    return target


if __name__ == "__main__":  # python -m poet_compiler.devices.profile  -> refresh the shipped schema
    print(write_schema())
