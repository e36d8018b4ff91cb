"""The pieces of a lab: the lab itself, hosts, their ports and management access, links.

Each class is one mapping of the topology file (``extra="forbid"``: an unknown key is an
error at its line). What one piece can check about itself is checked here (an MTU in range,
an address with its prefix); what needs the whole file (a link naming a port that exists,
both ends of a wire agreeing on the MTU) is in :mod:`ipsec_hil.lab.topology.checks`.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.topology.registry import model_names

Family = Literal["ipv4", "ipv6"]
Cipher = Literal["aes-gcm-16", "aes-cbc-hmac-sha256"]

#: The address families and ciphers a lab file may name (the schema's own: it imports
#: nothing of the suite's ESP arithmetic; tests/topology checks both spell them alike).
FAMILIES: tuple[str, ...] = get_args(Family)
CIPHERS: tuple[str, ...] = get_args(Cipher)

MTU_MAX = 9216
#: A port's egress buffer when the lab file states none: 128 KiB, a gigabit access switch's
#: per-port share of its packet memory (e.g. 1.5 MB shared by 12 ports). What a port holds
#: beyond its line rate is what a short trial can hide (ipsec_hil.lab.decision.bottleneck).
DEFAULT_QUEUE_KIB = 128.0
MTU_MIN_IPV4 = 576
MTU_MIN_IPV6 = 1280

IpInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


_COORDINATOR_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}$")
_PLACE_RE = re.compile(r"^([A-Za-z0-9_.-]|\{worker\})+$")
_TAG_KEY_RE = re.compile(r"^[a-z][a-z0-9_]+$")  # labgrid's TAG_KEY
_TAG_VAL_RE = re.compile(r"^[a-z0-9_]+$")  # labgrid's TAG_VAL, without the empty value


class LabgridInfo(_Model):
    """``lab.labgrid:`` -- the lab is shared through a labgrid coordinator.

    The run reserves a place (by ``place`` name or by reservation ``tags``, with ``prio``),
    waits its turn, acquires it and reads each appliance's SSH address and user from the
    place's ``NetworkService`` resources (so the appliances' ``mgmt`` holds no address).
    ``{worker}`` in ``place`` is the xdist worker (``gw0``...; ``main`` without xdist): each
    worker holds its own place. ``lease``: seconds after which a holder that stopped renewing
    its claim (a killed run) is kicked by the next run waiting for the place.
    See docs/shared-lab.md.
    """

    coordinator: str
    place: str | None = None
    tags: dict[str, str] | None = None
    prio: float = 0
    lease: float = Field(60, ge=10)

    @field_validator("coordinator")
    @classmethod
    def _coordinator(cls, v: str) -> str:
        if not _COORDINATOR_RE.match(v) or not 1 <= int(v.rsplit(":", 1)[1]) <= 65535:
            raise ValueError(f"expected HOST:PORT of the labgrid coordinator (e.g. labgrid.example:20408), found {v!r}")
        return v

    @field_validator("place")
    @classmethod
    def _place(cls, v: str | None) -> str | None:
        if v is not None and not _PLACE_RE.match(v):
            raise ValueError(f"expected a place name of letters, digits, _ . - and {{worker}}, found {v!r}")
        return v

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("expected at least one reservation tag (KEY: value), found none")
        for key, value in v.items():
            if not _TAG_KEY_RE.match(key) or not _TAG_VAL_RE.match(str(value)):
                raise ValueError("expected tags as key: value in lower-case letters, digits and _ "
                                 f"(a key starts with a letter), found {key}: {value!r}")
        return v

    @model_validator(mode="after")
    def _place_or_tags(self) -> LabgridInfo:
        if (self.place is None) == (self.tags is None):
            found = "both" if self.place is not None else "neither"
            raise ValueError(f"expected exactly one of place or tags, found {found}")
        return self

    def place_for(self, worker: str) -> str | None:
        """The place name of one xdist worker (``{worker}`` filled in), or None with tags."""
        return None if self.place is None else self.place.replace("{worker}", worker)

    def filters(self, worker: str) -> dict[str, str]:
        """The reservation filter: the tags, or ``name: PLACE`` (labgrid matches place names)."""
        return dict(self.tags) if self.tags is not None else {"name": self.place_for(worker) or ""}


class LabInfo(_Model):
    """``lab:`` -- the lab as a whole."""

    name: str = Field(min_length=1)
    virtual: bool = False
    known_hosts: Path | None = None
    labgrid: LabgridInfo | None = None


class Jump(_Model):
    """An SSH jump host in front of a lab's management network."""

    address: str = Field(min_length=1)
    port: int = Field(22, ge=1, le=65535)
    user: str = "root"
    key_file: Path | None = None


class Mgmt(_Model):
    """How the suite reaches a host: SSH (``address``...) or ``local`` (optionally in a netns).

    A virtual lab's file may leave it empty: the twin fills it in ``lab.resolved.yaml``.
    """

    address: str | None = None
    port: int = Field(22, ge=1, le=65535)
    user: str = "root"
    key_file: Path | None = None
    jump: Jump | None = None
    connect_timeout: float = Field(10, gt=0)
    command_timeout: float = Field(60, gt=0)
    local: bool = False
    netns: str | None = None

    @model_validator(mode="after")
    def _local_or_ssh(self) -> Mgmt:
        if self.local and (self.address or self.jump):
            raise ValueError("expected either local: true or an SSH address, found both")
        if self.netns and not self.local:
            raise ValueError("expected netns only with local: true, found netns on an SSH host")
        return self


def _interface(value: Any, family: str) -> Any:
    if value is None:
        return None
    example = "192.0.2.1/24" if family == "ipv4" else "2001:db8::1/64"
    kind = ipaddress.IPv4Interface if family == "ipv4" else ipaddress.IPv6Interface
    if isinstance(value, kind):
        return value
    if not isinstance(value, str) or "/" not in value:
        raise ValueError(
            f"expected an {family} address with prefix length (e.g. {example}), found {value!r}"
        )
    try:
        return kind(value)
    except ValueError:
        raise ValueError(
            f"expected an {family} address with prefix length (e.g. {example}), found {value!r}"
        ) from None


class Port(_Model):
    """One network port of a host: addresses (with prefix), MTU, the link's rate."""

    ipv4: ipaddress.IPv4Interface | None = None
    ipv6: ipaddress.IPv6Interface | None = None
    mtu: int = 1500
    rate_mbit: float | None = Field(None, gt=0)
    #: bytes the port's egress holds before it drops, in KiB (None: the link's, else
    #: DEFAULT_QUEUE_KIB); the NDR/PDR search sizes its trials against it (topologies/README.md)
    queue_kib: float | None = Field(None, gt=0)
    ifname: str | None = None  # the OS's name (e.g. ix0) when the suite must name it

    @field_validator("ipv4", mode="before")
    @classmethod
    def _v4(cls, v: Any) -> Any:
        return _interface(v, "ipv4")

    @field_validator("ipv6", mode="before")
    @classmethod
    def _v6(cls, v: Any) -> Any:
        return _interface(v, "ipv6")

    @field_validator("mtu")
    @classmethod
    def _mtu(cls, v: int, info: ValidationInfo) -> int:
        has_v6 = info.data.get("ipv6") is not None
        lo = MTU_MIN_IPV6 if has_v6 else MTU_MIN_IPV4
        if not lo <= v <= MTU_MAX:
            why = " (the port has an IPv6 address)" if has_v6 else ""
            raise ValueError(f"expected an MTU in {lo}..{MTU_MAX}{why}, found {v}")
        return v

    def address(self, family: str) -> IpInterface | None:
        """The port's interface address of ``family`` (``ipv4``/``ipv6``) with its prefix, or None."""
        if family not in FAMILIES:
            raise ValueError(f"unknown family {family!r}")
        return self.ipv4 if family == "ipv4" else self.ipv6

    def ip(self, family: str) -> str | None:
        """The port's own address of ``family`` without the prefix (``192.0.2.1``), or None."""
        addr = self.address(family)
        return None if addr is None else str(addr.ip)

    def network(self, family: str) -> str | None:
        """The network the port's ``family`` address is in (``198.51.100.0/26``), or None:
        a LAN port's network is what a tunnel's selectors cover."""
        addr = self.address(family)
        return None if addr is None else str(addr.network)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(f for f in FAMILIES if self.address(f) is not None)


OS_RELEASES = {"24.7": "14.1", "26.1": "14.3", "26.7": "15.1"}
"""OPNsense release -> the FreeBSD it is built on (issue 43): the seed pages' 24.7 on 14.1,
26.1 on 14.3, 26.7 on 15.1 (whose kernel has the IPSEC_OFFLOAD framework). The virtual
lab emulates exactly these (ipsec_hil_twin.fbsd.osrel.RELEASES)."""
DEFAULT_OPNSENSE = "24.7"


class OsSpec(_Model):
    """A host's ``os:``: which OPNsense / FreeBSD it runs. Either key names the pair (the
    other is filled in); both must agree. On the virtual lab it chooses what the emulated
    appliance prints; on hardware it states what the lab expects (the suite reads the
    running release from the appliance itself)."""

    opnsense: str | None = None
    freebsd: str | None = None

    @field_validator("opnsense", "freebsd", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        # YAML reads `24.7` as a float: take it as the version it spells
        return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _pair(self) -> OsSpec:
        by_freebsd = {f: o for o, f in OS_RELEASES.items()}
        if self.opnsense is not None and self.opnsense not in OS_RELEASES:
            raise ValueError(f"opnsense: expected one of {', '.join(OS_RELEASES)}, found {self.opnsense!r}")
        if self.freebsd is not None and self.freebsd not in by_freebsd:
            raise ValueError(f"freebsd: expected one of {', '.join(by_freebsd)}, found {self.freebsd!r}")
        if self.opnsense is None:
            self.opnsense = by_freebsd.get(self.freebsd or "", DEFAULT_OPNSENSE)
        if self.freebsd is None:
            self.freebsd = OS_RELEASES[self.opnsense]
        if OS_RELEASES[self.opnsense] != self.freebsd:
            raise ValueError(f"OPNsense {self.opnsense} runs FreeBSD {OS_RELEASES[self.opnsense]}, "
                             f"not {self.freebsd}")
        return self


class NoiseModel(_Model):
    """An appliance's ``noise:`` -- the run-to-run spread a real lab shows, stated so the
    virtual lab can show it too (absent: off, the lab deterministic; ``noise: {}``: on with
    these defaults). On hardware it is ignored: the lab brings its own.

    Three parts (ipsec_hil_twin.engine.cost draws them and derives the defaults from the
    pages' rows, `page_defaults()`; tests/decision/test_noise_model.py checks they agree):

    - fast, per epoch of ``epoch_s``: a rate factor min(1, exp(N(0, rate_sd))) scaling the pace
      of the associations the appliance's engine offloads (never above the link's rate) and a
      CPU factor exp(N(0, cpu_sd)) scaling what each packet costs its CPUs. ``rate_sd`` 0.0208:
      page 001's back-to-back 15 s runs (encrypting 979, 985; decrypting 985, 984) differ by
      0.31 % a run; a 15 s run averages its epochs and the link clips half of each draw, so a
      1 s draw needs 2.08 % to show 0.31 % at 15 s (0.78 % in a 2 s trial). ``cpu_sd`` 0.02:
      an assumption, no page repeats a CPU reading;
    - slow drift across runs, knots ``drift_s`` (3600, an assumption) apart, linearly
      interpolated: the rate's a shortfall exp(-|D|), the CPU's exp(D). ``drift_sd`` 0.0327:
      page 001's encrypting runs across the afternoon (955, then 979 and 985) spread 1.64 %, of
      which the fast part explains 0.31 %: 1.61 % of drift, a knot's sd 3.27 % (a shortfall
      between knots shows 0.49 of it). The CPU's drift the same, an assumption;
    - outliers: ``outlier_share`` 0.002 of epochs lose a fifth of their rate
      (``outlier_rate`` 0.8) and cost 25 % more CPU (``outlier_cpu`` 1.25): an assumption (no
      unexplained outlier in the pages' 28 stream figures).

    ``seed`` 0. The sds are relative (0.05 = 5 %), at most 1."""

    rate_sd: float = Field(0.0208, ge=0, le=1)
    cpu_sd: float = Field(0.02, ge=0, le=1)
    epoch_s: float = Field(1.0, gt=0)
    seed: int = 0
    drift_sd: float = Field(0.0327, ge=0, le=1)
    drift_s: float = Field(3600.0, gt=0)
    outlier_share: float = Field(0.002, ge=0, le=1)
    outlier_rate: float = Field(0.8, gt=0, le=1)
    outlier_cpu: float = Field(1.25, gt=0)


#: A host's keys that describe an appliance, and why the bench host has none.
APPLIANCE_ONLY = {"os": "it is the machine running pytest", "noise": "noise is an appliance's"}


class Host(_Model):
    """An appliance (with a model) or the bench PC."""

    role: Literal["appliance", "bench"]
    model: str | None = None
    profile: dict[str, Any] = Field(default_factory=dict)
    mgmt: Mgmt = Field(default_factory=Mgmt)
    ports: dict[str, Port] = Field(min_length=1)
    os: OsSpec | None = None
    noise: NoiseModel | None = None
    _name: str = PrivateAttr("")

    @field_validator(*APPLIANCE_ONLY)
    @classmethod
    def _appliance_only(cls, v: Any, info: ValidationInfo) -> Any:
        if v is not None and info.data.get("role") == "bench":
            name = info.field_name
            raise ValueError(f"expected no {name} on the bench host ({APPLIANCE_ONLY[name]}), found a mapping")
        return v

    @property
    def release(self) -> OsSpec:
        """The OPNsense / FreeBSD this appliance runs: its ``os:``, else 24.7 / 14.1."""
        return self.os if self.os is not None else OsSpec()

    @field_validator("model")
    @classmethod
    def _model(cls, v: str | None, info: ValidationInfo) -> str | None:
        """Checked against the models the loader was given (``context["models"]``, see
        :mod:`ipsec_hil.lab.topology.registry`), never against a table of its own."""
        role = info.data.get("role")
        models = (info.context or {}).get("models")
        if models is None:
            raise ValueError("expected the loader to pass the known models (load_topology(..., models=...)), found none")
        names = model_names(models)
        if role == "appliance" and v is None:
            raise ValueError(f"expected a model ({' or '.join(names)}) for an appliance, found none")
        if role == "bench" and v is not None:
            raise ValueError(f"expected no model on the bench host, found {v!r}")
        if v is not None and v not in names:
            raise ValueError(f"expected one of {', '.join(names)}, found {v!r}")
        return v

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_appliance(self) -> bool:
        return self.role == "appliance"

    def port(self, name: str) -> Port:
        try:
            return self.ports[name]
        except KeyError:
            raise LabError(f"host {self._name} has no port {name!r}; ports: {', '.join(self.ports)}") from None


class Link(_Model):
    """A point-to-point wire between two ports, ``a: host.port`` and ``b: host.port``."""

    a: str
    b: str
    rate_mbit: float | None = Field(None, gt=0)
    #: both ends' egress queue in KiB unless a port states its own (None: DEFAULT_QUEUE_KIB)
    queue_kib: float | None = Field(None, gt=0)

    @field_validator("a", "b")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        if not re.fullmatch(r"[^.\s]+\.[^.\s]+", v):
            raise ValueError(f"expected HOST.PORT (e.g. dut3300.lan), found {v!r}")
        return v

    @property
    def ends(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """((host, port), (host, port))."""
        a, b = self.a.split("."), self.b.split(".")
        return (a[0], a[1]), (b[0], b[1])


