"""Where the processes of a local stack listen, as `endpoints.json` records it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoints:
    api_url: str
    database_url: str
    valkey_url: str
    pubsub_emulator_host: str
    google_cloud_project: str

    def environment(self) -> dict[str, str]:
        """The variables another `agent-memory` command needs to reach this stack."""
        env = {
            "AM_DATABASE_URL": self.database_url,
            "AM_VALKEY_URL": self.valkey_url,
            "GOOGLE_CLOUD_PROJECT": self.google_cloud_project,
        }
        if self.pubsub_emulator_host:
            env["PUBSUB_EMULATOR_HOST"] = self.pubsub_emulator_host
        return env
