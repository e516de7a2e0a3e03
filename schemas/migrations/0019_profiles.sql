-- A user's profile: the values of the fields the app's profile schema names
-- (app_settings 'profile'), one row per user and field, and every change of them.

-- A field's current value (a JSON string, number or boolean, as its type says).
-- `observed_at` is the time of the observation that set it: an older one never
-- overwrites it (a late event is written to the history only).
CREATE TABLE profile_values (
    app             text NOT NULL,
    user_id         text NOT NULL,
    field           text NOT NULL,
    value           jsonb NOT NULL,
    observed_at     timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    -- '' for the extraction (its event says which), 'key:<id>' for a write through the API.
    source          text NOT NULL DEFAULT '',
    source_event_id text NOT NULL DEFAULT '',
    PRIMARY KEY (app, user_id, field)
);

-- Every change of a field, applied or not: SET (a new value), CLEARED (the value
-- removed) or HISTORY (a late observation, kept but not applied).
CREATE TABLE profile_revisions (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app             text NOT NULL,
    user_id         text NOT NULL,
    field           text NOT NULL,
    action          text NOT NULL CHECK (action IN ('SET', 'CLEARED', 'HISTORY')),
    value           jsonb,
    previous        jsonb,
    observed_at     timestamptz NOT NULL,
    applied         boolean NOT NULL,
    source          text NOT NULL DEFAULT '',
    source_event_id text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX profile_revisions_user ON profile_revisions (app, user_id, field, id);
