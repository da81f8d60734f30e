"""A routing zone's request row carries the parts its answer's commit wrote
with it (held in memory until then), as JSON: one row, not one per part.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("strato_schedule_requests") as t:
        t.add_column(sa.Column("parts", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("strato_schedule_requests") as t:
        t.drop_column("parts")
