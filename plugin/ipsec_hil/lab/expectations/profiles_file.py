"""A profiles file: appliance models a driver repository adds without editing the suite.

Why a file: a team with a new appliance installs the suite (``pip install ipsec-hil``)
and names its model's driver, counters and their roles in its own repository; the suite
reads the file at configure time (``--hil-profiles FILE`` or ini ``hil_profiles``) and the
model gets its marker, its expectations and its place in the reports like a built-in one.

Format (YAML)::

    models:
      xgs4500:
        driver: fooep
        module_file: /boot/modules/fooep.ko
        marker: needs an XGS 4500 (driver fooep) in the topology
        counters: [tx_enc, rx_dec, rx_bad]   # DESIGN.md's OID scheme (+ sa_count, sa_inet, sa_inet6)
        # or a mapping {logical name: OID}
        roles: {encrypted: [tx_enc], decrypted: [rx_dec], errors: [rx_bad]}
        known_issues: [{key: first_stream_after_boot, number: 777, summary: slow after boot}]
        floor_margin: 0.85                   # and replay_window, kernel_esp_worst_case_block,
                                             # accepts_ipv6_sa, unit, counter_lag_s, bypass_share

A mistake is a ProfileError naming the file and the field.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ipsec_hil.lab.errors import ProfileError
from ipsec_hil.lab.expectations.hardware import DEFAULT_COUNTER_LAG_S, CounterRoles, HardwareProfile, KnownIssue, default_oids


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: The roles a file names: CounterRoles' own fields (one definition: a role added to the
#: registry is accepted here at once), ``errors`` optional in a file.
_Roles = create_model(
    "_Roles", __base__=_Strict,
    **{f.name: (tuple[str, ...], ... if f.name in ("encrypted", "decrypted") else
                (f.default if f.default is not dataclasses.MISSING else ()))
       for f in dataclasses.fields(CounterRoles)},
)


class _Issue(_Strict):
    key: str
    number: int
    summary: str


class _Model(_Strict):
    driver: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    module_file: str
    marker: str = ""
    counters: list[str] | dict[str, str]
    roles: _Roles
    known_issues: list[_Issue] = []
    replay_window: int = Field(32, ge=0)
    kernel_esp_worst_case_block: int = Field(64, ge=0)
    accepts_ipv6_sa: bool = True
    floor_margin: float = Field(0.85, gt=0, le=1)
    unit: int = Field(0, ge=0)
    counter_lag_s: float = Field(DEFAULT_COUNTER_LAG_S, gt=0, le=10)
    bypass_share: float = Field(0.80, gt=0, le=1)


class _File(_Strict):
    models: dict[str, _Model]


def load_profiles_file(path: Path) -> list[HardwareProfile]:
    """The profiles a file defines; ProfileError ``FILE: models.NAME.FIELD: why`` when wrong."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read the profiles file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not YAML: {exc}") from None
    try:
        parsed = _File.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ProfileError(f"{path}: {where}: {first['msg']}") from None
    profiles = []
    for name, m in parsed.models.items():
        counters = (m.counters if isinstance(m.counters, dict)
                    else default_oids(m.driver, m.unit, tuple(m.counters)))
        try:
            profiles.append(HardwareProfile(
                model=name, driver=m.driver, module_file=m.module_file, counters=counters,
                roles=CounterRoles(**m.roles.model_dump()), marker=m.marker,
                known_issues=tuple(KnownIssue(i.key, i.number, i.summary) for i in m.known_issues),
                replay_window=m.replay_window, kernel_esp_worst_case_block=m.kernel_esp_worst_case_block,
                accepts_ipv6_sa=m.accepts_ipv6_sa, floor_margin=m.floor_margin, unit=m.unit,
                counter_lag_s=m.counter_lag_s, bypass_share=m.bypass_share,
            ))
        except ProfileError as exc:
            raise ProfileError(f"{path}: models.{name}: {exc}") from None
    return profiles
