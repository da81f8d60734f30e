"""Child zones an operator removed: a removed zone still running does not
register itself back when it stops hearing from its parent.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "strato_removed_children",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("removed_at", sa.DateTime, nullable=False),
        # Which zone was removed (its identity's sha256, its URL): another
        # zone that registers the name later is not refused for it.
        sa.Column("identity_hash", sa.String(64), nullable=True),
        sa.Column("url", sa.String(1024), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("strato_removed_children")
