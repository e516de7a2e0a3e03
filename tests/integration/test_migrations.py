import hashlib
import random
import shutil
import threading
import uuid
from datetime import UTC, datetime

import psycopg
import pytest

from shared.db.episodes import Episode, Episodes
from shared.db.migrate import (
    _LOCK_KEY,
    EmbeddingDimensionMismatch,
    MigrationError,
    check_embedding_dimension,
    discover,
    ensure_database,
    migrate,
)
from shared.db.search import vector_text
from tests.support import run_cli, wait_for


def test_migrate_creates_the_tables_and_is_idempotent(fresh_database):
    assert migrate(fresh_database, 768) == [m.path.name for m in discover()]
    assert migrate(fresh_database, 768) == []
    with psycopg.connect(fresh_database) as conn:
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        }
        applied = conn.execute("SELECT version, name FROM schema_migrations").fetchall()
        indexes = {
            row[0]: row[1]
            for row in conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
            ).fetchall()
        }
    assert tables >= {
        "memories",
        "memory_revisions",
        "episodes",
        "permission_rules",
        "processed_events",
        "operations",
        "deleted_users",
        "api_keys",
        "schema_migrations",
        "memory_changes",
        "app_settings",
        "entities",
        "entity_aliases",
        "entity_mentions",
        "entity_facts",
        "entity_merges",
        "memory_feedback",
    }
    assert applied == [
        (1, "init"),
        (2, "revision_history"),
        (3, "inline_vectors"),
        (4, "api_keys"),
        (5, "inline_text"),
        (6, "uncompressed_rows"),
        (7, "gin_without_pending_list"),
        (8, "episode_keys"),
        (9, "lexeme_counts"),
        (10, "lexeme_totals"),
        (11, "episode_keys_pending_list"),
        (12, "extraction_windows"),
        (13, "event_trail"),
        (14, "memory_lifecycle"),
        (15, "entities"),
        (16, "memory_edits"),
        (17, "agents"),
        (18, "memory_feedback"),
        (19, "profiles"),
        (20, "entity_judgements"),
        (21, "memories_scoped_metadata"),
        (22, "entity_mention_kinds"),
        (23, "operation_agents"),
        (24, "settings_each_name_once"),
    ]
    assert "USING hnsw (embedding vector_cosine_ops)" in indexes["memories_embedding"]
    assert "USING gin (tsv)" in indexes["memories_tsv"]
    assert "USING gin (metadata jsonb_path_ops)" in indexes["memories_metadata"]
    assert "USING gin (jsonb_set(" in indexes["memories_scoped_metadata"]
    assert "(memory_id, source, id)" in indexes["memory_feedback_memory"]
    assert "USING hnsw (embedding vector_cosine_ops)" in indexes["episodes_embedding"]
    assert "(app, user_id, session_id, created_at, turn_id)" in indexes["episodes_session_order"]
    live = indexes["memories_live_entity"]
    assert "UNIQUE" in live and "app, user_id, scope, project_id" in live


# Every column search reads on a candidate row, whether it is compressed or moved
# to TOAST, and the embedding's size in the row.
LAYOUT_SQL = """SELECT pg_column_toast_chunk_id(app) IS NOT NULL,
    pg_column_toast_chunk_id(user_id) IS NOT NULL, pg_column_toast_chunk_id(project_id) IS NOT NULL,
    pg_column_toast_chunk_id(text) IS NOT NULL, pg_column_toast_chunk_id(tsv) IS NOT NULL,
    pg_column_toast_chunk_id(embedding) IS NOT NULL,
    pg_column_compression(user_id), pg_column_compression(project_id),
    pg_column_compression(text), pg_column_compression(tsv), pg_column_compression(embedding),
    pg_column_size(embedding) FROM {table} WHERE user_id = %s"""


@pytest.mark.parametrize("embedding", ["dense", "sparse"])
def test_a_row_is_stored_whole_and_uncompressed_when_it_fits_a_page(fresh_database, embedding):
    # A Gemini embedding does not compress: 768 floats are 3 KB, more than the 2 KB
    # at which Postgres by default starts compressing a row's values and moving
    # them to TOAST. Before migration 0006 that moved a UUID user id and a long
    # project id out of the row and compressed the text; a sparse (hash) embedding
    # was itself compressed (about 280 bytes), and every exact distance
    # decompressed it again. Nothing search reads may be either.
    migrate(fresh_database, 768)
    rng = random.Random(5)
    if embedding == "dense":
        values = [rng.uniform(-1, 1) for _ in range(768)]
    else:
        values = [0.0] * 768
        for i in rng.sample(range(768), 40):
            values[i] = rng.uniform(-1, 1)
    user_id = "3f2a9c1e-7b4d-4e8a-9f1c-2d3e4f5a6b7c"
    project_id = "project-0123456789abcdef0123456789"
    text = "For project CloudRetail the backend is FastAPI on AlloyDB; " * 5
    with psycopg.connect(fresh_database) as conn:
        conn.execute(
            "INSERT INTO memories (app, user_id, project_id, scope, kind, text, embedding, "
            "observed_at) VALUES ('app-with-a-long-enough-name', %s, %s, 'project', 'fact', %s, "
            "%s::vector, now())",
            (user_id, project_id, text, vector_text(values)),
        )
        # An episode in the middle of its session: its key holds four neighbours.
        for n in range(5):
            Episodes(conn).archive_locally(
                Episode(
                    app="app-with-a-long-enough-name",
                    user_id=user_id,
                    project_id=project_id,
                    session_id="s",
                    turn_id=f"t{n}",
                    event_id=str(uuid.uuid4()),
                    user_text=text,
                    assistant_text=text,
                    tool_events=[],
                    created_at=datetime(2026, 5, 9, 14, n, tzinfo=UTC),
                ),
                lambda keys: [vector_text(values)] * len(keys),
                neighbours=2,
                dated=True,
            )
        for table in ("memories", "episodes"):
            layouts = conn.execute(LAYOUT_SQL.format(table=table), (user_id,)).fetchall()
            expected = (False,) * 6 + (None,) * 5 + (8 + 4 * 768,)
            assert layouts == [expected] * (5 if table == "episodes" else 1), table


def test_memories_go_straight_into_their_full_text_index_and_episodes_wait_in_a_list(
    fresh_database,
):
    # A GIN pending list is read whole by every search until a vacuum merges it:
    # none for the memories (every context reads them); a small one for the
    # episodes, whose keyed rows are written three times per archived turn.
    migrate(fresh_database, 768)
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        for i in range(20):
            conn.execute(
                "INSERT INTO memories (app, user_id, scope, kind, text, observed_at) "
                "VALUES ('a', 'u', 'global', 'fact', %s, now())",
                (f"The deploy window number {i} is on Tuesdays.",),
            )
            conn.execute(
                "INSERT INTO episodes (app, user_id, session_id, turn_id, event_id, user_text, "
                "assistant_text, text, created_at) VALUES ('a', 'u', 's', %s, "
                "gen_random_uuid(), 'x', 'y', %s, now())",
                (f"t{i}", f"We talked about deploy window {i}."),
            )
        found = {}
        for index in ("memories_tsv", "episodes_tsv"):
            options = conn.execute(
                "SELECT reloptions FROM pg_class WHERE relname = %s", (index,)
            ).fetchone()[0]
            pending = conn.execute(
                "SELECT pending_tuples FROM pgstatginindex(%s::regclass)", (index,)
            ).fetchone()[0]
            found[index] = (options, pending)
        assert found == {
            "memories_tsv": (["fastupdate=off"], 0),
            "episodes_tsv": (["fastupdate=on", "gin_pending_list_limit=512"], 20),
        }


def test_migration_0007_merges_a_pending_list_already_there(fresh_database):
    migrate(fresh_database, 768)
    (migration,) = [m for m in discover() if m.path.name == "0007_gin_without_pending_list.sql"]
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        conn.execute("ALTER INDEX memories_tsv SET (fastupdate = on)")  # as before 0007
        for i in range(20):
            conn.execute(
                "INSERT INTO memories (app, user_id, scope, kind, text, observed_at) "
                "VALUES ('a', 'u', 'global', 'fact', %s, now())",
                (f"The deploy window number {i} is on Tuesdays.",),
            )
        pending = "SELECT pending_tuples FROM pgstatginindex('memories_tsv'::regclass)"
        assert conn.execute(pending).fetchone() == (20,)
        conn.execute(migration.sql(768))
        assert conn.execute(pending).fetchone() == (0,)


def test_two_concurrent_migrations_apply_each_file_once(fresh_database):
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(migrate(fresh_database, 768))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert sorted(len(r) for r in results) == [0, len(discover())]


def test_migrate_says_what_it_applies_and_what_it_waits_for(settings, fresh_database):
    files = [m.path.name for m in discover()]
    # The command: each migration on stderr as it starts, the outcome on stdout.
    cli = run_cli(settings.model_copy(update={"database_url": fresh_database}), "migrate")
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == f"applied: {', '.join(files)}\n"
    assert cli.stderr.splitlines() == [f"migrate: applying {name} ..." for name in files]
    said: list[str] = []
    with psycopg.connect(fresh_database, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))  # another `migrate`
        waiting = threading.Thread(
            target=migrate, args=(fresh_database, 768), kwargs={"progress": said.append}
        )
        waiting.start()
        wait_for(lambda: said, 30, "the migration to say it waits")
        holder.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
        waiting.join(timeout=60)
    assert said == ["waiting for another migration of this database to finish ..."]


def test_a_project_fact_never_overwrites_another_projects(fresh_database):
    migrate(fresh_database, 768)
    insert = (
        "INSERT INTO memories (app, user_id, project_id, scope, kind, entity_name, text, "
        "observed_at) VALUES (%s, 'u', %s, %s, 'fact', 'backend', %s, now())"
    )
    with psycopg.connect(fresh_database) as conn:
        conn.execute(insert, ("a", "A", "project", "FastAPI"))
        conn.execute(insert, ("a", "B", "project", "Django"))
        conn.execute(insert, ("a", "", "global", "Flask"))
        conn.execute(insert, ("other-app", "A", "project", "Rails"))
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(insert, ("a", "A", "project", "Spring"))


def test_a_dimension_mismatch_names_both_numbers(fresh_database):
    migrate(fresh_database, 768)
    with psycopg.connect(fresh_database) as conn:
        check_embedding_dimension(conn, 768)
        with pytest.raises(EmbeddingDimensionMismatch) as caught:
            check_embedding_dimension(conn, 384)
    message = str(caught.value)
    assert "768 dimensions" in message and "AM_EMBEDDING_DIM is 384" in message
    with pytest.raises(EmbeddingDimensionMismatch):
        migrate(fresh_database, 384)


def test_a_process_refuses_to_start_on_a_mismatched_database(settings, fresh_database):
    migrate(fresh_database, 768)
    mismatched = settings.model_copy(update={"database_url": fresh_database, "embedding_dim": 384})
    result = run_cli(mismatched, "worker", "extraction", timeout=60)
    assert result.returncode != 0
    assert "but AM_EMBEDDING_DIM is 384" in result.stderr
    cli = run_cli(mismatched, "migrate")
    assert cli.returncode == 1
    assert "stores vectors of 768 dimensions" in cli.stderr


def _recorded(url: str) -> dict[int, str]:
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT version, checksum FROM schema_migrations").fetchall())


def test_the_checksum_leaves_comments_out_and_old_whole_file_checksums_still_migrate(
    fresh_database,
):
    migrations = discover()
    migrate(fresh_database, 768)
    assert _recorded(fresh_database) == {m.version: m.checksum for m in migrations}
    # A database that recorded whole-file hashes: of the files as they were then
    # (0001 and 0002, whose comments differ now), and of the others as they are.
    legacy = {
        1: "14bd25ba1c7afab49772ca2a6729a54c2f6c7a110fde185bc448dc2dce1a1548",
        2: "605f3d78e257c7ad29cc3dd3300694615b139a2748a371bf3f159f6331916bcd",
    }
    whole = {m.version: hashlib.sha256(m.path.read_bytes()).hexdigest() for m in migrations}
    assert whole[1] != legacy[1] and whole[2] != legacy[2]
    with psycopg.connect(fresh_database) as conn:
        for version, checksum in {**whole, **legacy}.items():
            conn.execute(
                "UPDATE schema_migrations SET checksum = %s WHERE version = %s",
                (checksum, version),
            )
    assert migrate(fresh_database, 768) == []


def test_a_migration_whose_statements_changed_after_it_was_applied_is_an_error(
    fresh_database, tmp_path
):
    for migration in discover():
        shutil.copy(migration.path, tmp_path / migration.path.name)
    migrate(fresh_database, 768, directory=tmp_path)
    changed = tmp_path / "0002_revision_history.sql"
    changed.write_text(
        "-- a comment may be reworded\n" + changed.read_text(encoding="utf-8"), encoding="utf-8"
    )
    assert migrate(fresh_database, 768, directory=tmp_path) == []
    changed.write_text(changed.read_text(encoding="utf-8") + "SELECT 1;\n", encoding="utf-8")
    with pytest.raises(MigrationError, match="0002_revision_history.sql changed after"):
        migrate(fresh_database, 768, directory=tmp_path)


def test_ensure_database_creates_a_missing_database_once(fresh_database):
    name = f"t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        try:
            assert ensure_database(conn, name) is True
            assert ensure_database(conn, name) is False
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            assert found.fetchall() == [(1,)]
        finally:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
