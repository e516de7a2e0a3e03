"""Postgres access: the pools, migrations, the unit of work, and one repository
module per aggregate (`memories`, `episodes`, `ledger`, `tombstones`,
`operations`, `permission_rules`, `api_keys`, and the hybrid `search`). No SQL
is written outside this package and `schemas/migrations/`."""
