"""The compaction worker: folds a user's old episodes into long-term summaries
(subscription `compaction-requests`); `requests` builds what it consumes."""
