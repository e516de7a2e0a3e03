"""Postgres access: the connection pool, the unit of work, migrations, repositories."""
