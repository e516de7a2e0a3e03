"""One user's memory as a file: export and import (a right-of-access request, a move
to another stack, a copy under another user).

The format is JSON Lines (`records`): a header, one line per memory with its
revisions, one per archived episode, and an end line. The export's SQL is in
`shared.db.user_export`, the import's writes in `shared.db.user_import`, and
`importing` is the import itself, the same for the CLI and the API.
"""
