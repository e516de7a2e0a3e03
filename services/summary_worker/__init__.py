"""The summary worker: keeps each session's Valkey buffer (subscription `turns-summary`)."""
