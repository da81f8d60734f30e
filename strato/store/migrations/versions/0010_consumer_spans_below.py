"""Which consumers of a zone with children have a part below too (a disk on
this zone's sharing pool, the host in a cell), so that the zone's usages
count each such consumer once.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("consumers") as t:
        t.add_column(sa.Column("spans_below", sa.Boolean))


def downgrade() -> None:
    with op.batch_alter_table("consumers") as t:
        t.drop_column("spans_below")
