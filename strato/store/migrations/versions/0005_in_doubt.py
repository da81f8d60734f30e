"""Requests left in doubt at a child zone, cancelled when it answers again.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "strato_in_doubt",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("child", sa.String(255), nullable=False),
        sa.Column("request_id", sa.String(255), nullable=False),
        sa.Column("consumers", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_error", sa.Text),
        sa.Column("created_at", sa.DateTime),
        sa.UniqueConstraint("child", "request_id", name="uq_strato_in_doubt"),
    )
    op.create_index("ix_strato_in_doubt_child", "strato_in_doubt", ["child"])


def downgrade() -> None:
    op.drop_index("ix_strato_in_doubt_child", "strato_in_doubt")
    op.drop_table("strato_in_doubt")
