-- Feedback on a memory: useful, not useful or wrong, with an optional reason.

-- One row per feedback given, never overwritten: a caller's latest counts in the
-- ranking (`shared.db.feedback`). `source` is who gave it ('key:<id>' of the API
-- key). A `wrong` feedback retires the memory (it is given to live memories only)
-- and keeps the events of the turns that wrote its texts (`source_events`): while
-- it stands (`restored_at` NULL), a turn of those is not extracted into the same
-- memory again. A rollback that makes the memory live again sets `restored_at`.
CREATE TABLE memory_feedback (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app           text NOT NULL,
    user_id       text NOT NULL,
    source        text NOT NULL,
    memory_id     uuid NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    rating        text NOT NULL CHECK (rating IN ('useful', 'not_useful', 'wrong')),
    reason        text NOT NULL DEFAULT '',
    source_events uuid[] NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    restored_at   timestamptz
);
-- A memory's feedback, each caller's latest first (the ranking's read).
CREATE INDEX memory_feedback_memory ON memory_feedback (memory_id, source, id);
CREATE INDEX memory_feedback_user ON memory_feedback (app, user_id);
-- The retirements that stand: what extraction checks a turn against.
CREATE INDEX memory_feedback_standing ON memory_feedback (app, user_id)
    WHERE rating = 'wrong' AND restored_at IS NULL;
