from alembic import context
from sqlalchemy import create_engine

from vlbatch.db.claim_tables import JobClaim  # noqa: F401  the claim counters' tables join the metadata
from vlbatch.db.models import Base
from vlbatch.db.retention_tables import TenantRetention  # noqa: F401  the retention tables join the metadata
from vlbatch.db.webhook_tables import WebhookEndpoint  # noqa: F401  the webhook tables join the metadata

config = context.config
url = config.get_main_option("sqlalchemy.url")
assert url is not None
connectable = create_engine(url)
with connectable.connect() as connection:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
connectable.dispose()
