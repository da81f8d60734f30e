"""The store's tables (SQLAlchemy Core).

The shape follows Placement's so that its semantics map one to one; Strato's
own additions (the change log the engine follows, provider metadata) sit
beside it. Migrations in ``strato/store/migrations`` create exactly this.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

# Standard resource classes keep their index in os-resource-classes as id;
# custom classes start here (as in Placement).
CUSTOM_RC_MIN_ID = 10000

resource_classes = sa.Table(
    "resource_classes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(255), nullable=False, unique=True),
    sa.Column("created_at", sa.DateTime, nullable=True),
    sa.Column("updated_at", sa.DateTime, nullable=True),
)

traits = sa.Table(
    "traits",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(255), nullable=False, unique=True),
    sa.Column("created_at", sa.DateTime, nullable=True),
    sa.Column("updated_at", sa.DateTime, nullable=True),
)

resource_providers = sa.Table(
    "resource_providers",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(36), nullable=False, unique=True),
    sa.Column("name", sa.String(200), nullable=False, unique=True),
    sa.Column("generation", sa.Integer, nullable=False, default=0),
    sa.Column("root_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id"),
              nullable=True, index=True),
    sa.Column("parent_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id"),
              nullable=True, index=True),
    sa.Column("created_at", sa.DateTime, nullable=True),
    sa.Column("updated_at", sa.DateTime, nullable=True),
)

inventories = sa.Table(
    "inventories",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("resource_provider_id", sa.Integer,
              sa.ForeignKey("resource_providers.id"), nullable=False),
    sa.Column("resource_class_id", sa.Integer, nullable=False),
    sa.Column("total", sa.Integer, nullable=False),
    sa.Column("reserved", sa.Integer, nullable=False),
    sa.Column("min_unit", sa.Integer, nullable=False),
    sa.Column("max_unit", sa.Integer, nullable=False),
    sa.Column("step_size", sa.Integer, nullable=False),
    sa.Column("allocation_ratio", sa.Float, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=True),
    sa.Column("updated_at", sa.DateTime, nullable=True),
    sa.UniqueConstraint("resource_provider_id", "resource_class_id",
                        name="uniq_inventories0resource_provider_resource_class"),
    sa.Index("inventories_resource_class_id_idx", "resource_class_id"),
)

placement_aggregates = sa.Table(
    "placement_aggregates",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(36), nullable=False, unique=True),
)

resource_provider_aggregates = sa.Table(
    "resource_provider_aggregates",
    metadata,
    sa.Column("resource_provider_id", sa.Integer,
              sa.ForeignKey("resource_providers.id"), primary_key=True),
    sa.Column("aggregate_id", sa.Integer, sa.ForeignKey("placement_aggregates.id"),
              primary_key=True, index=True),
)

resource_provider_traits = sa.Table(
    "resource_provider_traits",
    metadata,
    sa.Column("resource_provider_id", sa.Integer,
              sa.ForeignKey("resource_providers.id"), primary_key=True),
    sa.Column("trait_id", sa.Integer, sa.ForeignKey("traits.id"), primary_key=True,
              index=True),
)

projects = sa.Table(
    "projects",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("external_id", sa.String(255), nullable=False, unique=True),
)

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("external_id", sa.String(255), nullable=False, unique=True),
)

consumer_types = sa.Table(
    "consumer_types",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(255), nullable=False, unique=True),
)

consumers = sa.Table(
    "consumers",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(36), nullable=False, unique=True),
    sa.Column("project_id", sa.Integer, sa.ForeignKey("projects.id"), nullable=False,
              index=True),
    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False, index=True),
    sa.Column("consumer_type_id", sa.Integer, sa.ForeignKey("consumer_types.id"),
              nullable=True),
    sa.Column("generation", sa.Integer, nullable=False, default=0),
    sa.Column("created_at", sa.DateTime, nullable=True),
    sa.Column("updated_at", sa.DateTime, nullable=True),
    # Strato: the request (as this zone's ledger knows it) whose claim made
    # the consumer; "" for any other write, NULL for one made before this was
    # recorded. A late cancel of that request undoes the consumer only while
    # it is still the one the request made.
    sa.Column("placed_by", sa.String(255), nullable=True),
    # Strato, at a zone with children: the consumer has allocations in a zone
    # below too (this zone's sharing pool and a cell's host, made as one), so
    # this zone's usages count it once.
    sa.Column("spans_below", sa.Boolean, nullable=True),
)

allocations = sa.Table(
    "allocations",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("resource_provider_id", sa.Integer,
              sa.ForeignKey("resource_providers.id"), nullable=False),
    sa.Column("consumer_id", sa.String(36), nullable=False, index=True),
    sa.Column("resource_class_id", sa.Integer, nullable=False),
    sa.Column("used", sa.Integer, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=True),
    sa.Column("updated_at", sa.DateTime, nullable=True),
    sa.Index("allocations_resource_provider_class_used_idx",
             "resource_provider_id", "resource_class_id", "used"),
)

# Strato: a monotonically increasing change sequence. Every committed write
# that changes what the engine indexes appends the providers it touched, so
# that every server process of a zone can refresh incrementally and never
# answers from a view older than the writes committed before a request.
change_counter = sa.Table(
    "strato_change_counter",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
)

changes = sa.Table(
    "strato_changes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("seq", sa.BigInteger, nullable=False, index=True),
    sa.Column("resource_provider_uuid", sa.String(36), nullable=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=True),
)

# Strato: per-provider metadata (issue 4 item 2, issue 7). One row per provider
# that has any; a provider without a row has no location, no tags and is not
# subject to heartbeats. The row goes with its provider (ON DELETE CASCADE), so
# deleting a provider needs no knowledge of this table.
provider_meta = sa.Table(
    "strato_provider_meta",
    metadata,
    sa.Column("resource_provider_id", sa.Integer,
              sa.ForeignKey("resource_providers.id", ondelete="CASCADE"), primary_key=True),
    # Canonical slash form, widest domain first; None: inherit the root's.
    sa.Column("location", sa.String(255), nullable=True),
    # JSON list of tag strings, sorted.
    sa.Column("tags", sa.Text, nullable=False, default="[]"),
    sa.Column("last_report_at", sa.DateTime, nullable=True, index=True),
    # True once an agent reported, or when an operator asks for heartbeats.
    sa.Column("heartbeat", sa.Boolean, nullable=False, default=False),
    sa.Column("updated_at", sa.DateTime, nullable=True),
)

# Strato: server-group membership for affinity rules. A member's placement is
# read from its live allocations, so a consumer that loses its allocations
# (DELETE /allocations, a reshape) stops counting without touching this table.
group_members = sa.Table(
    "strato_group_members",
    metadata,
    sa.Column("group_name", sa.String(255), primary_key=True),
    sa.Column("consumer_uuid", sa.String(36), primary_key=True, index=True),
    sa.Column("created_at", sa.DateTime, nullable=True),
)

# Strato: answers of POST /strato/v1/schedule by request_id, written in the
# claim's transaction, so a retried request returns the first answer and never
# claims twice.
schedule_requests = sa.Table(
    "strato_schedule_requests",
    metadata,
    sa.Column("request_id", sa.String(255), primary_key=True),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("response", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=True, index=True),
    # Unix time after which the request's caller no longer waits for it.
    sa.Column("deadline", sa.Float, nullable=True),
    # Which attempt at this zone holds the reservation (a retry after an
    # outage is another attempt: an older one may not touch its work).
    sa.Column("attempt", sa.String(32), nullable=True),
    # At a routing zone: the parts asked of children that the answer's commit
    # wrote with it (JSON [[child, part id, [consumers]], ...]; held in memory
    # until then). Those recorded before (strato_request_parts) are not here.
    sa.Column("parts", sa.Text, nullable=True),
    sa.Index("ix_strato_schedule_requests_open", "status", "deadline"),
)

# Strato: every part a request created in other zones or here (a child's
# schedule or claim, a pool hold, this zone's own placement), recorded under
# the request's id before the part is asked for, so that one cancel undoes
# all of them.
request_parts = sa.Table(
    "strato_request_parts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("request_id", sa.String(255), nullable=False),
    # A child zone's name; "" for this zone's own providers.
    sa.Column("child", sa.String(255), nullable=False),
    # The id the part is known by where it lives.
    sa.Column("part_id", sa.String(255), nullable=False),
    sa.Column("consumers", sa.Text, nullable=False),
    sa.Column("attempt", sa.String(32), nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=True, index=True),
    sa.UniqueConstraint("request_id", "child", "part_id", name="uq_strato_request_parts"),
)

# Strato: facts about this zone itself (its identity towards its parent).
zone_meta = sa.Table(
    "strato_zone_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

# Strato: this zone's direct children in the zone tree. A parent stores only
# how to reach each child and its static metadata, never the child's providers.
children = sa.Table(
    "strato_children",
    metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("url", sa.String(1024), nullable=False),
    sa.Column("location_prefix", sa.String(255), nullable=True),
    # JSON list of tag strings.
    sa.Column("tags", sa.Text, nullable=False, default="[]"),
    # The token this zone sends as X-Auth-Token when it calls the child.
    sa.Column("credential", sa.String(1024), nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=True),
    sa.Column("updated_at", sa.DateTime, nullable=True),
    # sha256 of the secret identity the child registered with: only that
    # zone may re-register the name while it is alive.
    sa.Column("identity_hash", sa.String(64), nullable=True),
)

# Strato: child zones an operator removed (DELETE /strato/v1/children/{name}).
# A removed zone that is still running and registers again on its own (it
# stopped hearing from this zone: `rejoin`) is refused; a zone that starts
# afresh, or an admin's registration, clears the name.
removed_children = sa.Table(
    "strato_removed_children",
    metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("removed_at", sa.DateTime, nullable=False),
    sa.Column("identity_hash", sa.String(64), nullable=True),
    sa.Column("url", sa.String(1024), nullable=True),
)

# Strato: provisional claims of a cross-zone placement. A held claim expires
# (its allocations are released) unless confirmed before `expires_at`. The
# coordinating zone also records the remote parts it must confirm, so that
# after a crash it can finish (or undo) what it decided.
# Strato: requests sent to a child that may have acted on them without this
# zone learning the answer (timeout, connection lost after sending). The
# child is asked to cancel each one when it answers again.
in_doubt = sa.Table(
    "strato_in_doubt",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("child", sa.String(255), nullable=False, index=True),
    # The request id the child knows the request by.
    sa.Column("request_id", sa.String(255), nullable=False),
    sa.Column("consumers", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=True),
    sa.UniqueConstraint("child", "request_id", name="uq_strato_in_doubt"),
)

provisional_claims = sa.Table(
    "strato_provisional_claims",
    metadata,
    sa.Column("consumer_uuid", sa.String(36), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("expires_at", sa.DateTime, nullable=False, index=True),
    # JSON: [{"zone": name, "consumers": [...]}] parts held in other zones.
    sa.Column("remote", sa.Text, nullable=False, default="[]"),
    sa.Column("created_at", sa.DateTime, nullable=True),
    # The request (as this zone knows it) and its attempt that made the claim.
    sa.Column("request_id", sa.String(255), nullable=True, index=True),
    sa.Column("attempt", sa.String(32), nullable=True),
)
