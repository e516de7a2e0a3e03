"""Create an API key of one app and store it in Secret Manager, never printing it.

Runs in the agent-memory image as the Cloud Run job `<name>-api-key-<app>`
(infra/terraform/jobs.tf), with AM_DATABASE_URL and the job's service account:

    python /opt/agent-memory/mint_api_key.py --app APP --secret projects/P/secrets/S

It runs `agent-memory keys create`, adds the key as a new version of the secret
(Secret Manager's REST API, with the service account's token from the metadata
server), and prints only the key's id. Each run is a new key: the previous one
keeps working until it is revoked (`agent-memory keys revoke ID`, e.g. through
the migrate job with other arguments), which is how keys are rotated.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import urllib.request

METADATA_ENDPOINT = (
    "http://metadata.google.internal/computeMetadata/v1/instance/service-account/token"
)
VAULT_API = "https://secretmanager.googleapis.com/v1"  # Secret Manager
KEY_PREFIX = "am_"  # shared/api_keys.py


def key_from_output(stdout: str) -> tuple[str, str]:
    """Split `agent-memory keys create` output into (the line naming the key, the key)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if len(lines) < 2 or not lines[-1].startswith(KEY_PREFIX) or " " in lines[-1]:
        raise ValueError("unexpected output from `agent-memory keys create`")
    return lines[0], lines[-1]


def _request(url: str, headers: dict[str, str], body: bytes | None = None) -> dict:
    request = urllib.request.Request(url, data=body, headers=headers)  # noqa: S310 (fixed URLs)
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return json.loads(response.read())


def access_token() -> str:
    return _request(METADATA_ENDPOINT, {"Metadata-Flavor": "Google"})["access_token"]


def add_secret_version(secret: str, value: str, token: str) -> str:
    """Add `value` as the newest version of `secret` (projects/P/secrets/S)."""
    body = json.dumps(
        {"payload": {"data": base64.b64encode(value.encode("utf-8")).decode("ascii")}}
    ).encode("utf-8")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return _request(f"{VAULT_API}/{secret}:addVersion", headers, body)["name"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app", required=True)
    parser.add_argument("--secret", required=True, help="projects/PROJECT/secrets/SECRET")
    parser.add_argument("--admin", action="store_true", help="an admin key of the app")
    args = parser.parse_args(argv)

    command = [sys.executable, "-m", "services.cli", "keys", "create", "--app", args.app]
    command += ["--name", f"secret {args.secret.rsplit('/', 1)[-1]}"]
    if args.admin:
        command.append("--admin")
    created = subprocess.run(command, capture_output=True, text=True, check=False)
    if created.returncode != 0:
        print(created.stderr, file=sys.stderr, end="")
        return created.returncode
    described, key = key_from_output(created.stdout)
    try:
        version = add_secret_version(args.secret, key, access_token())
    except Exception as exc:
        # The key exists but nobody has it: say which one to revoke.
        print(f"{described.rstrip(':')}: storing it failed ({exc!r}); revoke it", file=sys.stderr)
        return 1
    print(f"{described.split(' (')[0]}; stored as {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
