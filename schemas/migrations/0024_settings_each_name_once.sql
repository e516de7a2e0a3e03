-- The agents' sharing names each kind and topic once, and a profile enum each value
-- once without regard to case (services/api/config_models.py, profile_models.py):
-- a setting put before those checks is rewritten so, keeping each first one, so
-- that it reads back as a PUT would now store it.
UPDATE app_settings s SET value = s.value
    || jsonb_build_object('shared_kinds', (
        SELECT coalesce(jsonb_agg(d.k ORDER BY d.first), '[]'::jsonb) FROM (
            SELECT e.k, min(e.n) AS first
            FROM jsonb_array_elements_text(coalesce(s.value -> 'shared_kinds', '[]')) WITH ORDINALITY e(k, n)
            GROUP BY e.k) d))
    || jsonb_build_object('shared_topics', (
        SELECT coalesce(jsonb_agg(d.k ORDER BY d.first), '[]'::jsonb) FROM (
            SELECT e.k, min(e.n) AS first
            FROM jsonb_array_elements_text(coalesce(s.value -> 'shared_topics', '[]')) WITH ORDINALITY e(k, n)
            GROUP BY e.k) d))
WHERE s.name = 'agents';

UPDATE app_settings s SET value = jsonb_set(s.value, '{fields}', (
    SELECT coalesce(jsonb_agg(
        CASE WHEN x.f ->> 'type' = 'enum' THEN jsonb_set(x.f, '{values}', (
            SELECT coalesce(jsonb_agg(d.v ORDER BY d.first), '[]'::jsonb) FROM (
                SELECT DISTINCT ON (lower(e.v)) e.v, e.n AS first
                FROM jsonb_array_elements_text(coalesce(x.f -> 'values', '[]')) WITH ORDINALITY e(v, n)
                ORDER BY lower(e.v), e.n) d))
        ELSE x.f END ORDER BY x.i), '[]'::jsonb)
    FROM jsonb_array_elements(s.value -> 'fields') WITH ORDINALITY x(f, i)))
WHERE s.name = 'profile' AND jsonb_typeof(s.value -> 'fields') = 'array';
