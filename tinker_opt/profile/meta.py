"""`meta.json` of a profiled-data folder as a typed `ProfileMeta`, read and written only here.

Both profilers (profile/runner.py measures, profile/analytic.py computes) write it, the `profile`
verb adds where the profile came from (`with_origin`), and `search` / `simulate` read it back.
A Tinker folder has no meta.json: tinker_compat builds a ProfileMeta with `source = "tinker"`
and no model shape. Keys this class does not name are kept in `extra` and written back as they
were, so an older or newer folder round-trips. Needs no torch.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_opt.errors import ProfileDataError
from tinker_opt.io_utils import write_text_atomic
from tinker_opt.specs import ModelSpec

META_FILE = "meta.json"


@dataclass(frozen=True, kw_only=True)
class ProfileMeta:
    """What a profile folder says about itself (all optional: hand-made folders hold little)."""

    tool: str | None = None
    """`tinker-opt` for our profilers."""
    source: str | None = None
    """`tinker` for a Tinker profiled_data.csv folder (no meta.json on disk)."""
    format_version: int | None = None
    model: dict[str, Any] | None = None
    """ModelSpec.to_dict(); None for a Tinker folder (the shape comes from the launch script)."""
    device: Any = None
    """{kind, name, count}; `analytic:<hardware>` for an analytic profile."""
    hardware: dict[str, Any] | None = None
    """The hardware description that timed an analytic profile."""
    train: dict[str, Any] | None = None
    """The script's micro_batch_size, global_batch_size and strategy (measured profiles)."""
    kernels: dict[str, Any] | None = None
    """The fused kernels the script asked for, what the device ran for each op, warnings for those it
    lacks, and per block the implementation of each op (profile/kernels.py; measured profiles)."""
    settings: dict[str, Any] | None = None
    versions: dict[str, str] | None = None
    comm_source: str | None = None
    started: str | None = None
    finished: str | None = None
    profile_seconds: float | None = None
    rows: dict[str, int] | None = None
    script_path: str | None = None
    """The launch script profiled (absolute); search rewrites it unless given another."""
    model_name: str | None = None
    model_size: str | None = None
    framework_version: str | None = None
    is_full_tune: bool | None = None
    swap_optimizer_times: int | None = None
    times_include_tp_comm: bool | None = None
    """True when block times already include the TP / SP collectives (Tinker folders): the cost
    model must not add them again."""
    times_include_ep_comm: bool | None = None
    """True when block times already include the expert all-to-all (Tinker folders, ep > 1)."""
    attention_mask_bytes: int | None = None
    """The attention mask Tinker charges (seq^2 bytes), recorded once for the whole stack."""
    notes: list[str] | None = None
    """What was assumed about the folder, one line each (search records them in summary.json)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys not named above (a Tinker folder's model_info, seq_length, version files, ...)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileMeta:
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(
            **{k: v for k, v in data.items() if k in names},
            extra={k: v for k, v in data.items() if k not in names},
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of meta.json: the set fields in declaration order, then `extra`."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**{k: v for k, v in out.items() if v is not None}, **self.extra}

    def model_spec(self, folder: Path) -> ModelSpec:
        """The profiled model; a ProfileDataError when the folder does not record one."""
        if self.model is None:
            raise ProfileDataError(
                f"{Path(folder) / META_FILE} has no 'model' entry; re-run `tinker-opt profile`"
            )
        return ModelSpec.from_dict(self.model)

    @property
    def global_batch_size(self) -> int | None:
        """The profiled script's global batch size (measured profiles record it under `train`)."""
        return (self.train or {}).get("global_batch_size")

    def with_origin(self, **origin: Any) -> ProfileMeta:
        """A copy with the `profile` verb's notes (script_path, labels, framework_version, ...)."""
        return dataclasses.replace(self, **origin)


def read_meta(folder: Path) -> ProfileMeta:
    """meta.json of `folder`; a one-line ProfileDataError when it is missing or not JSON."""
    path = Path(folder) / META_FILE
    if not path.exists():
        raise ProfileDataError(
            f"{path} is missing; the profile folder is incomplete, re-run `tinker-opt profile`"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ProfileDataError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}); "
            "re-run `tinker-opt profile`"
        ) from None
    if not isinstance(data, dict):
        raise ProfileDataError(f"{path} must hold a JSON object; re-run `tinker-opt profile`")
    return ProfileMeta.from_dict(data)


def write_meta(folder: Path, meta: ProfileMeta) -> Path:
    """Write meta.json atomically."""
    return write_text_atomic(Path(folder) / META_FILE, json.dumps(meta.to_dict(), indent=2) + "\n")
