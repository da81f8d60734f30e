"""Provider metadata: location, tags and heartbeats.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "strato_provider_meta",
        sa.Column("resource_provider_id", sa.Integer,
                  sa.ForeignKey("resource_providers.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("location", sa.String(255), nullable=True),
        sa.Column("tags", sa.Text, nullable=False),
        sa.Column("last_report_at", sa.DateTime, nullable=True),
        sa.Column("heartbeat", sa.Boolean, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=True),
    )
    op.create_index("ix_strato_provider_meta_last_report_at", "strato_provider_meta",
                    ["last_report_at"])


def downgrade() -> None:
    op.drop_index("ix_strato_provider_meta_last_report_at", "strato_provider_meta")
    op.drop_table("strato_provider_meta")
