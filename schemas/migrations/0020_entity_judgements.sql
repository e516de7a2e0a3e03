-- A model provider's extraction may judge which known entity a name is
-- (shared/entities/judging.py): an alias taken by that judgement says so.

ALTER TABLE entity_aliases DROP CONSTRAINT entity_aliases_how_check;
ALTER TABLE entity_aliases ADD CONSTRAINT entity_aliases_how_check CHECK (how IN (
    'name', 'nickname', 'first name', 'full name', 'similar', 'merge', 'model'));
