"""Alembic's entry point: runs the migrations on the connection normlab.store.migrate hands over.

There is no alembic.ini and no URL here: `normlab db upgrade` resolves the database from the settings,
takes the upgrade lock on that connection, and passes it in `config.attributes["connection"]`.
"""

from alembic import context

from normlab.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
