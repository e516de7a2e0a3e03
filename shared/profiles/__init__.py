"""A user's profile: the typed fields an app's profile schema names, filled by the
extraction and by the API, read without a search (docs/design.md, "Profiles")."""
