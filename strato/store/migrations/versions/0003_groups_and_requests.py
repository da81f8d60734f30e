"""Server-group membership and idempotent schedule answers.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "strato_group_members",
        sa.Column("group_name", sa.String(255), primary_key=True),
        sa.Column("consumer_uuid", sa.String(36), primary_key=True),
        sa.Column("created_at", sa.DateTime),
    )
    op.create_index("ix_strato_group_members_consumer_uuid", "strato_group_members",
                    ["consumer_uuid"])
    op.create_table(
        "strato_schedule_requests",
        sa.Column("request_id", sa.String(255), primary_key=True),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("response", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime),
    )
    op.create_index("ix_strato_schedule_requests_created_at", "strato_schedule_requests",
                    ["created_at"])
