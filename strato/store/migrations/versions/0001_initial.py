"""Initial schema: Placement's resource model plus Strato's change log.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _timestamps() -> list[sa.Column]:
    return [sa.Column("created_at", sa.DateTime), sa.Column("updated_at", sa.DateTime)]


def upgrade() -> None:
    op.create_table(
        "resource_classes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        *_timestamps(),
    )
    op.create_table(
        "traits",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        *_timestamps(),
    )
    op.create_table(
        "resource_providers",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(36), nullable=False, unique=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("root_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id")),
        sa.Column("parent_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id")),
        *_timestamps(),
    )
    op.create_index("ix_resource_providers_root_provider_id", "resource_providers",
                    ["root_provider_id"])
    op.create_index("ix_resource_providers_parent_provider_id", "resource_providers",
                    ["parent_provider_id"])
    op.create_table(
        "inventories",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("resource_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id"),
                  nullable=False),
        sa.Column("resource_class_id", sa.Integer, nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("reserved", sa.Integer, nullable=False),
        sa.Column("min_unit", sa.Integer, nullable=False),
        sa.Column("max_unit", sa.Integer, nullable=False),
        sa.Column("step_size", sa.Integer, nullable=False),
        sa.Column("allocation_ratio", sa.Float, nullable=False),
        *_timestamps(),
        sa.UniqueConstraint("resource_provider_id", "resource_class_id",
                            name="uniq_inventories0resource_provider_resource_class"),
    )
    op.create_index("inventories_resource_class_id_idx", "inventories", ["resource_class_id"])
    op.create_table(
        "placement_aggregates",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(36), nullable=False, unique=True),
    )
    op.create_table(
        "resource_provider_aggregates",
        sa.Column("resource_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id"),
                  primary_key=True),
        sa.Column("aggregate_id", sa.Integer, sa.ForeignKey("placement_aggregates.id"),
                  primary_key=True),
    )
    op.create_index("ix_resource_provider_aggregates_aggregate_id",
                    "resource_provider_aggregates", ["aggregate_id"])
    op.create_table(
        "resource_provider_traits",
        sa.Column("resource_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id"),
                  primary_key=True),
        sa.Column("trait_id", sa.Integer, sa.ForeignKey("traits.id"), primary_key=True),
    )
    op.create_index("ix_resource_provider_traits_trait_id", "resource_provider_traits",
                    ["trait_id"])
    for name in ("projects", "users"):
        op.create_table(
            name,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("external_id", sa.String(255), nullable=False, unique=True),
        )
    op.create_table(
        "consumer_types",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
    )
    op.create_table(
        "consumers",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(36), nullable=False, unique=True),
        sa.Column("project_id", sa.Integer, sa.ForeignKey("projects.id"), nullable=False),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("consumer_type_id", sa.Integer, sa.ForeignKey("consumer_types.id")),
        sa.Column("generation", sa.Integer, nullable=False),
        *_timestamps(),
    )
    op.create_index("ix_consumers_project_id", "consumers", ["project_id"])
    op.create_index("ix_consumers_user_id", "consumers", ["user_id"])
    op.create_table(
        "allocations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("resource_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id"),
                  nullable=False),
        sa.Column("consumer_id", sa.String(36), nullable=False),
        sa.Column("resource_class_id", sa.Integer, nullable=False),
        sa.Column("used", sa.Integer, nullable=False),
        *_timestamps(),
    )
    op.create_index("ix_allocations_consumer_id", "allocations", ["consumer_id"])
    op.create_index("allocations_resource_provider_class_used_idx", "allocations",
                    ["resource_provider_id", "resource_class_id", "used"])
    op.create_table(
        "strato_change_counter",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
    )
    op.bulk_insert(sa.table("strato_change_counter", sa.column("id"), sa.column("seq")),
                   [{"id": 1, "seq": 0}])
    op.create_table(
        "strato_changes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("resource_provider_uuid", sa.String(36)),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime),
    )
    op.create_index("ix_strato_changes_seq", "strato_changes", ["seq"])
