"""Server settings, from flags or STRATO_* environment variables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Settings:
    db_url: str
    # None: development mode (Placement's noauth2 behaviour), loopback only.
    auth_token: str | None = None
    max_body_bytes: int = 16 * 1024 * 1024
    zone_name: str = "local"
    # Server processes on this database (`strato serve --workers`): a zone
    # with children runs one (its in-flight and loop checks are per process).
    workers: int = 1
    sqlite_synchronous: str = "FULL"
    # Seconds without a report after which a provider subject to heartbeats is
    # stale: 3 x the agent's default 30 s interval.
    stale_after: float = 90.0
    # Candidate ranking (GET /allocation_candidates). None: the STRATO_WEIGHER,
    # STRATO_CLASS_WEIGHTS, STRATO_RANDOMIZE_CANDIDATES, STRATO_MAX_CANDIDATES
    # environment variable, else the engine's default (spread, equal weights,
    # deterministic ties, no cap), so a Settings built in code still honours them.
    weigher: str | None = None
    class_weights: Mapping[str, float] | None = None
    randomize_candidates: bool | None = None
    max_candidates: int | None = None
    max_combinations: int | None = None
    # The zone tree. This zone's static metadata, what its parent sees before
    # any summary: a location prefix (e.g. "dfw") and tags (e.g. "hipaa").
    location_prefix: str | None = None
    zone_tags: tuple[str, ...] = ()
    # Register with this parent at start-up (POST {parent}/strato/v1/children),
    # giving it `advertise_url` and `zone_credential` to call back with.
    parent_url: str | None = None
    parent_token: str | None = None
    advertise_url: str | None = None
    zone_credential: str | None = None
    # How often children's summaries are refreshed, and how long a child may
    # take to answer before it is skipped and marked unhealthy.
    summary_interval: float = 5.0
    # A child that no zone above has called for this long registers again.
    rejoin_after: float = 60.0
    child_timeout: float = 5.0
    # A schedule request's whole budget at the zone a client asked.
    request_timeout: float = 30.0
    # A cross-zone placement's held parts are released after this many seconds
    # unless confirmed.
    hold_ttl: float = 30.0
    # Answers kept by request id (repeats, and cancels from a parent that lost
    # an answer) are purged after this many seconds.
    request_retention: float = 7 * 86400.0
    # Schedule requests a zone plans and claims at once on its own providers
    # (per process). 1 measured best on SQLite with 2 cores: concurrent
    # planners only contend for the GIL (benchmarks/README.md).
    schedule_concurrency: int = 1
    # Routing zones' request ledger: "sync" (each write waits for the disk) or
    # "async" (bounded window on a machine crash); see TreeConfig.
    ledger_commit: str = "sync"
    # CORS (Placement's [cors] allowed_origin and allow_headers): none, no CORS.
    cors_allowed_origins: tuple[str, ...] = ()
    cors_allow_headers: tuple[str, ...] = ()
    # Placement's policy defaults: "legacy" (its default), "secure" (new defaults
    # only) or "open" (any authenticated caller); strato/api/policy.py.
    policy: str = "legacy"
    # An operator's policy file (Placement's YAML), read by oslo.policy: its
    # rules replace the defaults of `policy` (strato/api/policy.py).
    policy_file: str | None = None
    # GET /metrics: open (None, as /healthz and /readyz) or behind this token
    # (Authorization: Bearer TOKEN, as Prometheus sends it, or X-Auth-Token).
    metrics_token: str | None = None
    # Every write, who asked and what came of it, as JSON lines: a file path,
    # "-" for standard error, or None for no audit log (strato/api/audit.py).
    audit_log: str | None = None
    # Mutual TLS for zone links (strato/tls.py): this zone's certificate and
    # key, and the CA its peers' certificates are checked against.
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    # Keystone (strato/api/keystone.py): tokens validated there when a URL is
    # given, with this zone's own service credentials.
    keystone_url: str | None = None
    keystone_user: str | None = None
    keystone_password: str | None = None
    keystone_project: str = "service"
    keystone_domain: str = "Default"
    token_cache_seconds: float = 300.0
    # The token child zones register with (role "zone": registration only).
    registration_token: str | None = None
    # The token this zone's parent calls it with (role "parent_zone": the zone
    # protocol and routed Placement calls); given to the parent at
    # registration in place of `auth_token`, which then never leaves the zone.
    link_token: str | None = None
