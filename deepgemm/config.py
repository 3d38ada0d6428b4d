"""GemmConfig: the compile-time knobs of a stage, their defaults and their checks.

A stage declares its defaults as a GemmConfig; a caller's GemmConfig overrides the fields it sets. Every
field becomes a `-D` define of the same name in upper case, which is how `kernel.cu` receives it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace


@dataclass(frozen=True)
class GemmConfig:
    """Tile shape and pipeline depth; `None` means "the stage's default".

    `extra` holds knobs only some stages have (v1's THREAD_M, v2's WARPS_M, v4's GROUP_M ...), by their
    define name.
    """

    block_m: int | None = None
    block_n: int | None = None
    block_k: int | None = None
    num_stages: int | None = None
    extra: Mapping[str, int] = field(default_factory=dict)

    def merged_over(self, defaults: GemmConfig) -> GemmConfig:
        """This config's set fields over `defaults`; unknown extra knobs are an error."""
        unknown = set(self.extra) - set(defaults.extra)
        if unknown:
            raise ValueError(
                f"config knobs {sorted(unknown)} do not exist for this stage; it has {sorted(defaults.extra)}"
            )
        core = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        absent = [name for name, value in core.items() if value is not None and getattr(defaults, name) is None]
        if absent:
            raise ValueError(f"config fields {absent} are not knobs of this stage")
        merged = replace(defaults, **{k: v for k, v in core.items() if v is not None})
        return replace(merged, extra={**defaults.extra, **self.extra})

    def key(self) -> tuple:
        """The fields as a hashable tuple: equal configs, equal keys (the library call's plan cache)."""
        return (self.block_m, self.block_n, self.block_k, self.num_stages, tuple(sorted(self.extra.items())))

    def defines(self) -> dict[str, int]:
        """The `-D` defines this config compiles to."""
        out = {f.name.upper(): getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out.update(self.extra)
        return {name: value for name, value in out.items() if value is not None}

    @classmethod
    def from_defines(cls, defines: Mapping[str, int]) -> GemmConfig:
        """Knobs by define name (`NUM_STAGES`, `GROUP_M`) as a config: its own fields, the rest extra."""
        core = {name.lower(): int(value) for name, value in defines.items() if is_core_define(name)}
        extra = {name: int(value) for name, value in defines.items() if not is_core_define(name)}
        return cls(**core, extra=extra)

    def value(self, name: str) -> int:
        """A knob by its define name (`BLOCK_M`, `GROUP_M`); a plan asks a dozen times, so no dict is built."""
        core = name.lower()
        found = self.extra.get(name) if core not in _CORE_FIELDS else getattr(self, core)
        if found is None:
            raise ValueError(f"this config has no knob {name}; it has {sorted(self.defines())}")
        return found


_CORE_FIELDS = frozenset(f.name for f in fields(GemmConfig) if f.name != "extra")


def is_core_define(name: str) -> bool:
    """Whether a define names one of GemmConfig's own fields (`BLOCK_M`; `block_m` is an unknown extra knob)."""
    return name.isupper() and name.lower() in _CORE_FIELDS


def parse_defines(text: str, *, upper: bool = True) -> dict[str, int]:
    """'NUM_STAGES=2,GROUP_M=1' as {'NUM_STAGES': 2, 'GROUP_M': 1} (names upper-cased, unless not `upper`:
    then the text is a config's exact `defines()`); '' as {}. ValueError names a part that is not NAME=INTEGER."""
    defines = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip() or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"a knob is NAME=INTEGER, e.g. NUM_STAGES=2; got {part!r}")
        defines[name.strip().upper() if upper else name.strip()] = int(value)
    return defines


def require_multiple(cfg: GemmConfig, name: str, multiple: int, why: str) -> None:
    """Raise ValueError unless knob `name` is a positive multiple of `multiple`."""
    value = cfg.value(name)
    if not isinstance(value, int) or value <= 0 or value % multiple:
        raise ValueError(f"{name} = {value} must be a positive multiple of {multiple} ({why})")


def require_in(cfg: GemmConfig, name: str, allowed: tuple[int, ...], why: str) -> None:
    """Raise ValueError unless knob `name` is one of `allowed`."""
    value = cfg.value(name)
    if value not in allowed:
        raise ValueError(f"{name} = {value} must be one of {allowed} ({why})")


def require_at_most(what: str, value: int, limit: int, limit_name: str) -> None:
    """Raise ValueError when a resource a config asks for exceeds the GPU's limit."""
    if value > limit:
        raise ValueError(f"{what} = {value} exceeds the GPU's {limit_name} of {limit}")


ELEMENT_BYTES = 2  # FP16 and BF16 operands


def tile_smem_bytes(cfg: GemmConfig) -> int:
    """NUM_STAGES buffers of one BLOCK_M x BLOCK_K tile of A and one BLOCK_N x BLOCK_K tile of B."""
    return (
        cfg.value("NUM_STAGES") * (cfg.value("BLOCK_M") + cfg.value("BLOCK_N")) * cfg.value("BLOCK_K") * ELEMENT_BYTES
    )


def require_wgmma_tile(
    cfg: GemmConfig,
    block_n: tuple[int, ...] = (256,),
    block_m: tuple[int, ...] = (128,),
    box_k: tuple[int, ...] = (64,),
) -> None:
    """The tile of the 128B-swizzled wgmma stages (v4, v5), BLOCK_M one of `block_m` (64 per consumer
    warpgroup), BLOCK_N one of `block_n` (the wgmma N the kernel can issue) and BOX_K one of `box_k` (v4
    also takes 32, two 64-byte boxes with the 64-byte swizzle, and 8, 16-byte boxes with none): ValueError
    names the knob and why."""
    require_in(cfg, "BLOCK_M", block_m, "consumer warpgroups x wgmma m64")
    require_in(cfg, "BLOCK_N", block_n, "the N of the wgmma m64nNk16 the kernel issues")
    require_in(cfg, "BLOCK_K", (64,), "one 128-byte swizzle row of 2-byte elements")
    require_in(cfg, "BOX_K", box_k, "one box spans the whole 128-byte swizzle row, or v4's half or eighth of it")
