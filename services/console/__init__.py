"""The operator's console: server-rendered pages under `/console`, served by the
API process with the same API keys (services.console.app installs it)."""
