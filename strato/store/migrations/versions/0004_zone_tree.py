"""The zone tree: children of this zone, provisional cross-zone claims.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "strato_children",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("url", sa.String(1024), nullable=False),
        sa.Column("location_prefix", sa.String(255)),
        sa.Column("tags", sa.Text, nullable=False),
        sa.Column("credential", sa.String(1024)),
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
    )
    op.create_table(
        "strato_provisional_claims",
        sa.Column("consumer_uuid", sa.String(36), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("expires_at", sa.DateTime, nullable=False),
        sa.Column("remote", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime),
    )
    op.create_index("ix_strato_provisional_claims_expires_at", "strato_provisional_claims",
                    ["expires_at"])
