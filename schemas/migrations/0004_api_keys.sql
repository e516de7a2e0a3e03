-- API keys: each belongs to one app (the tenant). Only a SHA-256 of the key is
-- stored: keys are 256-bit random strings, so a fast hash is enough (there is no
-- password to guess) and lookups stay one index probe per request.
CREATE TABLE api_keys (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app         text NOT NULL,
    name        text NOT NULL DEFAULT '',
    key_hash    bytea NOT NULL UNIQUE,
    prefix      text NOT NULL,  -- the key's first characters, to recognise it in a list
    admin       boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
CREATE INDEX api_keys_app ON api_keys (app, created_at);
