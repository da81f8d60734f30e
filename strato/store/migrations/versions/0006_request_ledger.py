"""The request ledger at every zone: deadlines, the parts a request created,
the request a provisional claim belongs to, and zone identities.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("strato_schedule_requests") as t:
        t.add_column(sa.Column("deadline", sa.Float))
        t.add_column(sa.Column("attempt", sa.String(32)))
    op.create_index("ix_strato_schedule_requests_open", "strato_schedule_requests",
                    ["status", "deadline"])
    op.create_table(
        "strato_request_parts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("request_id", sa.String(255), nullable=False),
        sa.Column("child", sa.String(255), nullable=False),
        sa.Column("part_id", sa.String(255), nullable=False),
        sa.Column("consumers", sa.Text, nullable=False),
        sa.Column("attempt", sa.String(32)),
        sa.Column("created_at", sa.DateTime),
        sa.UniqueConstraint("request_id", "child", "part_id", name="uq_strato_request_parts"),
    )
    op.create_index("ix_strato_request_parts_created_at", "strato_request_parts",
                    ["created_at"])
    with op.batch_alter_table("strato_provisional_claims") as t:
        t.add_column(sa.Column("request_id", sa.String(255)))
        t.add_column(sa.Column("attempt", sa.String(32)))
    op.create_index("ix_strato_provisional_claims_request_id", "strato_provisional_claims",
                    ["request_id"])
    with op.batch_alter_table("strato_children") as t:
        t.add_column(sa.Column("identity_hash", sa.String(64)))
    op.create_table(
        "strato_zone_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("strato_zone_meta")
    with op.batch_alter_table("strato_children") as t:
        t.drop_column("identity_hash")
    op.drop_index("ix_strato_provisional_claims_request_id", "strato_provisional_claims")
    with op.batch_alter_table("strato_provisional_claims") as t:
        t.drop_column("attempt")
        t.drop_column("request_id")
    op.drop_index("ix_strato_request_parts_created_at", "strato_request_parts")
    op.drop_table("strato_request_parts")
    op.drop_index("ix_strato_schedule_requests_open", "strato_schedule_requests")
    with op.batch_alter_table("strato_schedule_requests") as t:
        t.drop_column("attempt")
        t.drop_column("deadline")
