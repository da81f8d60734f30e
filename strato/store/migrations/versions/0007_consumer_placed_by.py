"""The request that made each consumer, so that a late cancel of it leaves a
consumer released since and made again by another request alone.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("consumers") as t:
        t.add_column(sa.Column("placed_by", sa.String(255)))


def downgrade() -> None:
    with op.batch_alter_table("consumers") as t:
        t.drop_column("placed_by")
