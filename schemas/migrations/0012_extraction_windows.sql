-- Extraction windows: the turns of a session archived and waiting for one
-- extraction call together (docs/design.md, "Extraction windows"). A row leaves
-- in the transaction that extracts its turn (with the turn's ledger row), or
-- when its window is dead-lettered (the turn is then in turns-extraction's
-- dead letters). `message` is the turn event as a worker publishes it, so a
-- dead-lettered window can hand back each of its turns unchanged. When a window
-- closes, its turns get the id of the extraction request that extracts them.
CREATE TABLE extraction_pending (
    app                 text NOT NULL,
    user_id             text NOT NULL,
    session_id          text NOT NULL,
    event_id            uuid NOT NULL,
    turn_id             text NOT NULL,
    project_id          text NOT NULL DEFAULT '',
    prev_session_id     text NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL,
    user_text           text NOT NULL,
    assistant_text      text NOT NULL,
    message             bytea NOT NULL,
    published_at        timestamptz,          -- Pub/Sub's publish time of the turn
    enrolled_at         timestamptz NOT NULL DEFAULT now(),
    close_requested_at  timestamptz,          -- when the window closed
    window_id           uuid,                 -- the extraction request of the closed window
    PRIMARY KEY (app, user_id, session_id, event_id)
);

-- A session flushed (or followed by the user's next session) up to a Pub/Sub
-- publish time: a turn published before it that arrives later closes its
-- window at once instead of waiting for the idle timeout.
CREATE TABLE extraction_flushes (
    app         text NOT NULL,
    user_id     text NOT NULL,
    session_id  text NOT NULL,
    through     timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app, user_id, session_id)
);
