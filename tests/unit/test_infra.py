"""The deployment files agree with the code: the Terraform's Pub/Sub topology with
`agent-memory topology apply`, docker-compose.yml with the settings and the CLI,
infra/Dockerfile with the packaging. Files are read, nothing is run or reached."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import tomllib
import uuid
from pathlib import Path
from types import ModuleType

import hcl2
import pytest
from google.cloud import pubsub_v1

from services.cli.main import main
from services.cli.parser import build_parser
from services.worker import WORKERS
from shared.api_keys import new_key
from shared.bus.admin import DesiredSubscription, TopologyAdmin
from shared.bus.topology import SUBSCRIPTIONS, TOPICS
from shared.config import Settings, env_name
from shared.events import CompactionRequested, decode
from shared.events.schemas import schema_definition

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
TERRAFORM = INFRA / "terraform"
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = INFRA / "Dockerfile"

SETTING_NAMES = {env_name(field) for field in Settings.model_fields}


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, INFRA / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _squash(text: str) -> str:
    """HCL with comments dropped and every run of whitespace made one space."""
    text = re.sub(r"(?m)^\s*#.*$", "", text)
    return re.sub(r"\s+", " ", text)


def _tf() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(TERRAFORM.glob("*.tf")))


def _block(text: str, header: str) -> str:
    """The body of the first block whose header (e.g. `resource "a" "b"`) is given."""
    start = text.index(header + " {") + len(header) + 2
    depth, i = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start : i - 1]


def _resource(kind: str, name: str) -> str:
    return _squash(_block(_tf(), f'resource "{kind}" "{name}"'))


# -- Terraform: the Pub/Sub topology -----------------------------------------------


def test_topology_json_is_generated_from_the_code():
    export = _script("export_topology")
    current = (TERRAFORM / "topology.json").read_text(encoding="utf-8")
    assert current == export.render(), "stale: run .venv/bin/python infra/export_topology.py"


def _default_settings() -> Settings:
    # The code's defaults, whatever this process's environment says.
    fields = Settings.model_fields
    names = (
        "topic_prefix",
        "ack_deadline_seconds",
        "max_delivery_attempts",
        "retry_min_backoff_seconds",
        "retry_max_backoff_seconds",
    )
    return Settings(google_cloud_project="p", **{n: fields[n].default for n in names})


def _admin() -> TopologyAdmin:
    # The client classes' path helpers are static: no client is built, nothing is reached.
    return TopologyAdmin(
        _default_settings(),
        publisher=pubsub_v1.PublisherClient,
        subscriber=pubsub_v1.SubscriberClient,
        schemas=pubsub_v1.SchemaServiceClient,
    )


def _terraform_subscriptions(project: str) -> set[DesiredSubscription]:
    """What pubsub.tf declares with the default variables, read from topology.json the
    way its locals and resources read it (test_pubsub_tf_reads_the_topology checks that)."""
    topology = json.loads((TERRAFORM / "topology.json").read_text(encoding="utf-8"))
    d = topology["defaults"]
    prefix = d["topic_prefix"]

    def topic(short: str) -> str:
        return f"projects/{project}/topics/{prefix}{short}"

    def sub(short: str) -> str:
        return f"projects/{project}/subscriptions/{prefix}{short}"

    declared = set()
    for name, spec in topology["subscriptions"].items():
        declared.add(
            DesiredSubscription(
                name=sub(name),
                topic=topic(spec["topic"]),
                ordered=spec["ordered"],
                ack_deadline_seconds=d["ack_deadline_seconds"],
                dead_letter_topic=topic(spec["dead_letter"]),
                max_delivery_attempts=d["max_delivery_attempts"] + 1,
                retry_min=d["retry_min_backoff_seconds"],
                retry_max=max(d["retry_max_backoff_seconds"], d["retry_min_backoff_seconds"]),
            )
        )
        declared.add(
            DesiredSubscription(
                name=sub(spec["dead_letter"]),
                topic=topic(spec["dead_letter"]),
                ordered=False,
                ack_deadline_seconds=topology["dead_letter_ack_deadline_seconds"],
                dead_letter_topic=None,
                max_delivery_attempts=None,
                retry_min=None,
                retry_max=None,
            )
        )
    return declared


def test_terraform_subscriptions_are_the_ones_topology_apply_creates():
    admin = _admin()
    assert _terraform_subscriptions("p") == set(admin.desired_subscriptions())
    # Spelled out, the facts docs/design.md states ("Topics and subscriptions").
    by_name = {s.name.rsplit("/", 1)[1]: s for s in admin.desired_subscriptions()}
    for name in ("turns-summary", "turns-extraction"):
        assert by_name[f"agent-memory-{name}"].ordered
        assert by_name[f"agent-memory-{name}"].topic == "projects/p/topics/agent-memory-turns"
    for spec in SUBSCRIPTIONS:
        worker = by_name[f"agent-memory-{spec.name}"]
        assert worker.dead_letter_topic == f"projects/p/topics/agent-memory-{spec.name}-dlq"
        assert (worker.max_delivery_attempts, worker.ack_deadline_seconds) == (6, 30)
        assert (worker.retry_min, worker.retry_max) == (1, 60)
        assert f"agent-memory-{spec.name}-dlq" in by_name


def test_terraform_topics_and_schemas_are_the_ones_topology_apply_creates():
    topology = json.loads((TERRAFORM / "topology.json").read_text(encoding="utf-8"))
    admin = _admin()
    prefix = topology["defaults"]["topic_prefix"]
    declared_topics = {f"projects/p/topics/{prefix}{t}" for t in topology["topics"]} | {
        f"projects/p/topics/{prefix}{s['dead_letter']}" for s in topology["subscriptions"].values()
    }
    expected_topics = {admin.topic_path(t.name) for t in TOPICS} | {
        s.dead_letter_topic for s in admin.desired_subscriptions() if s.dead_letter_topic
    }
    assert declared_topics == expected_topics
    for spec in TOPICS:
        entry = topology["topics"][spec.name]
        assert f"projects/p/schemas/{prefix}{entry['schema']}" == admin.schema_path(spec.event_type)
        # The file Terraform attaches is the one the code validates with.
        schema_file = ROOT / entry["schema_file"]
        assert schema_file.read_text(encoding="utf-8") == schema_definition(spec.event_type)


def test_pubsub_tf_reads_the_topology():
    locals_ = _squash(_block((TERRAFORM / "main.tf").read_text(encoding="utf-8"), "locals"))
    assert 'jsondecode(file("${path.module}/topology.json"))' in locals_
    for name in (
        "topic_prefix",
        "ack_deadline_seconds",
        "max_delivery_attempts",
        "retry_min_backoff_seconds",
    ):
        assert f"{name} = coalesce(var.{name}, local.defaults.{name})" in locals_
    assert (
        "retry_max_backoff_seconds = max( coalesce(var.retry_max_backoff_seconds, "
        "local.defaults.retry_max_backoff_seconds), local.retry_min_backoff_seconds, )"
    ) in locals_

    schema = _resource("google_pubsub_schema", "event")
    assert 'type = "AVRO"' in schema
    assert 'definition = file("${path.module}/../../${each.value.schema_file}")' in schema
    topic = _resource("google_pubsub_topic", "event")
    assert "for_each = local.topology.topics" in topic
    assert 'name = "${local.topic_prefix}${each.key}"' in topic
    assert "schema = google_pubsub_schema.event[each.key].id" in topic
    assert 'encoding = "JSON"' in topic
    dead_topic = _resource("google_pubsub_topic", "dead_letter")
    assert "for_each = local.topology.subscriptions" in dead_topic
    assert 'name = "${local.topic_prefix}${each.value.dead_letter}"' in dead_topic

    worker = _resource("google_pubsub_subscription", "worker")
    for line in (
        "for_each = local.topology.subscriptions",
        'name = "${local.topic_prefix}${each.key}"',
        "topic = google_pubsub_topic.event[each.value.topic].id",
        "enable_message_ordering = each.value.ordered",
        "ack_deadline_seconds = local.ack_deadline_seconds",
        "dead_letter_topic = google_pubsub_topic.dead_letter[each.key].id",
        "max_delivery_attempts = local.max_delivery_attempts + 1",
        'minimum_backoff = "${local.retry_min_backoff_seconds}s"',
        'maximum_backoff = "${local.retry_max_backoff_seconds}s"',
    ):
        assert line in worker
    dead = _resource("google_pubsub_subscription", "dead_letter")
    assert 'name = "${local.topic_prefix}${each.value.dead_letter}"' in dead
    assert "topic = google_pubsub_topic.dead_letter[each.key].id" in dead
    assert "ack_deadline_seconds = local.dead_letter_ack_deadline_seconds" in dead
    for absent in ("enable_message_ordering", "dead_letter_policy", "retry_policy"):
        assert absent not in dead


def test_the_pubsub_service_agent_can_dead_letter():
    tf = _squash(_tf())
    assert (
        "pubsub_service_agent = "
        '"serviceAccount:service-${data.google_project.this.number}'
        '@gcp-sa-pubsub.iam.gserviceaccount.com"'
    ) in tf
    publisher = _resource("google_pubsub_topic_iam_member", "dead_letter_publisher")
    assert "topic = google_pubsub_topic.dead_letter[each.key].id" in publisher
    assert 'role = "roles/pubsub.publisher"' in publisher
    assert "member = local.pubsub_service_agent" in publisher
    subscriber = _resource("google_pubsub_subscription_iam_member", "dead_letter_subscriber")
    assert "subscription = google_pubsub_subscription.worker[each.key].id" in subscriber
    assert 'role = "roles/pubsub.subscriber"' in subscriber
    assert "member = local.pubsub_service_agent" in subscriber


# -- Terraform: IAM, services, variables ----------------------------------------------


def test_least_privilege_pubsub_bindings():
    tf = _squash(_tf())
    # Subscriber grants: each subscription to its consumer, and the service agent.
    subscriber_grants = re.findall(
        r'resource "google_pubsub_subscription_iam_member" "(\w+)" \{(.*?)\}', tf
    )
    assert {name for name, _ in subscriber_grants} == {
        "dead_letter_subscriber",
        "webhook_subscriber",  # the service agent, for the webhooks' dead-lettering
        "worker_subscriber",
    }
    worker = _resource("google_pubsub_subscription_iam_member", "worker_subscriber")
    assert "member = google_service_account.service[each.value.consumer].member" in worker
    # The API may publish but never subscribe; nobody gets a project-wide Pub/Sub role.
    assert 'service["api"]' not in worker
    project_roles = set(re.findall(r'google_project_iam_member" "\w+" \{.*?role = "([^"]+)"', tf))
    assert project_roles == {
        "roles/aiplatform.user",
        "roles/alloydb.databaseUser",
        "roles/serviceusage.serviceUsageConsumer",
    }
    api = _resource("google_pubsub_topic_iam_member", "api_publisher")
    assert 'role = "roles/pubsub.publisher"' in api
    assert (
        'api_publishes = [ "turns", "memory-generate", "compaction-requests", '
        '"extraction-requests", "memory-changes", ]' in tf
    )
    assert 'change_publishers = ["extraction", "compaction"]' in tf
    assert {t.name for t in TOPICS} == {
        "turns",
        "memory-generate",
        "compaction-requests",
        "extraction-requests",
        "memory-changes",
    }


def test_one_cloud_run_service_per_worker_kind_with_always_allocated_cpu():
    assert set(json.loads((TERRAFORM / "topology.json").read_text())["workers"]) == set(WORKERS)
    tf = _squash(_tf())
    scaling = _squash(_block(_tf(), "worker_scaling ="))
    for kind in WORKERS:
        assert f"{kind} = {{ min = var.{kind}_min_instances, max = var.{kind}_max_instances }}" in (
            scaling
        )
        assert f'variable "{kind}_min_instances"' in tf
        assert f'variable "{kind}_max_instances"' in tf
    run = _squash((TERRAFORM / "run.tf").read_text(encoding="utf-8"))
    start, end = run.index("services = merge("), run.index('resource "google_cloud_run_v2_service"')
    services, service = run[start:end], _resource("google_cloud_run_v2_service", "service")
    for text, fragments in (
        (
            services,
            [
                "for kind in keys(local.topology.workers) : kind => {",
                'args = ["worker", kind]',
                "scaling = local.worker_scaling[kind]",
                'args = ["api"]',
                "scaling = { min = var.api_min_instances, max = var.api_max_instances }",
            ],
        ),
        (
            service,
            [
                "for_each = local.services",
                "args = each.value.args",
                "cpu_idle = false",
                "min_instance_count = each.value.scaling.min",
                # Each worker, and the API, runs as its own service account.
                "service_account = google_service_account.service[each.key].email",
            ],
        ),
    ):
        for fragment in fragments:
            assert fragment in text, fragment


def _unquote(value: object) -> object:
    """python-hcl2 keeps the quotes of block labels and strings; drop them."""
    if isinstance(value, dict):
        return {str(_unquote(k)): _unquote(v) for k, v in value.items() if k != "__is_block__"}
    if isinstance(value, list):
        return [_unquote(v) for v in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _parsed() -> dict[str, dict[str, dict]]:
    """Every .tf file parsed with python-hcl2 (a file that is not valid HCL fails
    here): block type -> label -> body; resources as `kind.name`."""
    found: dict[str, dict[str, dict]] = {}
    for path in sorted(TERRAFORM.glob("*.tf")):
        with path.open(encoding="utf-8") as f:
            parsed = _unquote(hcl2.load(f))
        for block_type in ("resource", "data", "variable", "output"):
            for entry in parsed.get(block_type, []):
                for label, body in entry.items():
                    if block_type in ("resource", "data"):
                        for name, inner in body.items():
                            found.setdefault(block_type, {})[f"{label}.{name}"] = inner
                    else:
                        found.setdefault(block_type, {})[label] = body
    return found


def test_every_terraform_file_parses_and_the_subscriptions_carry_the_policies():
    parsed = _parsed()
    resources = parsed["resource"]
    worker = resources["google_pubsub_subscription.worker"]
    assert worker["for_each"] == "${local.topology.subscriptions}"
    assert worker["enable_message_ordering"] == "${each.value.ordered}"
    assert worker["ack_deadline_seconds"] == "${local.ack_deadline_seconds}"
    assert worker["dead_letter_policy"] == [
        {
            "dead_letter_topic": "${google_pubsub_topic.dead_letter[each.key].id}",
            "max_delivery_attempts": "${local.max_delivery_attempts + 1}",
        }
    ]
    assert worker["retry_policy"] == [
        {
            "minimum_backoff": "${local.retry_min_backoff_seconds}s",
            "maximum_backoff": "${local.retry_max_backoff_seconds}s",
        }
    ]
    assert worker["expiration_policy"] == [{"ttl": ""}]  # never expires
    [target] = resources["google_cloud_scheduler_job.compaction"]["pubsub_target"]
    assert target["topic_name"] == '${google_pubsub_topic.event["compaction-requests"].id}'
    assert target["attributes"]["event_type"] == "compaction.requested.v1"
    for kind in ("variable", "output"):
        assert parsed[kind]
        for name, body in parsed[kind].items():
            assert body.get("description"), f"{kind} {name} has no description"


def test_terraform_sets_only_real_settings():
    names = set(re.findall(r"\b(AM_[A-Z0-9_]+)\b", _tf())) | {"GOOGLE_CLOUD_PROJECT"}
    assert names - SETTING_NAMES == set()


def test_jobs_run_real_commands():
    jobs = (TERRAFORM / "jobs.tf").read_text(encoding="utf-8")
    commands = []
    for literal in re.findall(r'args\s*=\s*(\["[a-z][^\n]*\])\n', jobs):
        argv = json.loads(re.sub(r"(?<=[\[, ])app(?=[\],])", '"x"', literal))
        build_parser().parse_args(argv)
        commands.append(argv[0])
    assert commands == ["migrate", "compact"]


def _hcl_assignments(block: str) -> dict[str, str]:
    """`name = value` lines of an HCL object, as text."""
    return dict(re.findall(r"(?m)^\s*(\w+)\s*=\s*(.+?)\s*$", block))


def test_the_scheduled_sweep_is_a_valid_compaction_request_without_a_user():
    text = (TERRAFORM / "scheduler.tf").read_text(encoding="utf-8")
    job = _block(text, 'resource "google_cloud_scheduler_job" "compaction"')
    target = _block(job, "pubsub_target")
    assert 'topic_name = google_pubsub_topic.event["compaction-requests"].id' in target
    app, name = "default", "agent-memory"
    sweep_id = str(
        uuid.uuid5(uuid.NAMESPACE_URL, f"https://agent-memory/compaction-sweep/{name}/{app}")
    )
    assert 'uuidv5("url", "https://agent-memory/compaction-sweep/${var.name}/${app}")' in text
    values = {
        "each.value.event_id": sweep_id,
        "each.key": app,
        "var.compaction_retention_days": 30,
    }

    def value(expression: str) -> object:
        return values[expression] if expression in values else json.loads(expression)

    body_text = target[target.index("jsonencode({") + len("jsonencode({") : target.index("}))")]
    body = {k: value(v) for k, v in _hcl_assignments(body_text).items()}
    attributes = {k: value(v) for k, v in _hcl_assignments(_block(target, "attributes =")).items()}
    event = decode(json.dumps(body).encode(), attributes)
    assert isinstance(event, CompactionRequested)
    assert (event.user_id, event.app, event.retention_days) == ("", app, 30)
    assert set(body) == {
        f["name"] for f in json.loads(schema_definition(event.EVENT_TYPE))["fields"]
    }


def test_api_key_job_reads_the_cli_output():
    mint = _script("mint_api_key")
    key = new_key()
    # The output of `agent-memory keys create` (services/cli/keys.py).
    stdout = f"created key 1f0c for app default (shown once, keep it):\n{key}\n"
    assert mint.key_from_output(stdout) == (
        "created key 1f0c for app default (shown once, keep it):",
        key,
    )
    with pytest.raises(ValueError):
        mint.key_from_output("agent-memory: something failed\n")


# -- docker-compose.yml ---------------------------------------------------------------


def _compose_services() -> dict[str, str]:
    """Service name -> its block of docker-compose.yml."""
    text = COMPOSE.read_text(encoding="utf-8")
    body = text.split("\nservices:\n", 1)[1]
    body = re.split(r"\n(?=[a-z])", body, maxsplit=1)[0]  # up to the next top-level key
    parts = re.split(r"(?m)^  ([a-z][a-z0-9-]*):\s*$", body)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _anchor(name: str) -> str:
    text = COMPOSE.read_text(encoding="utf-8")
    return text.split(f"&{name}\n", 1)[1].split("\n\n", 1)[0]


def test_compose_uses_only_real_settings():
    text = COMPOSE.read_text(encoding="utf-8")
    used = set(re.findall(r"\b(AM_[A-Z0-9_]+)\b", text))
    assert used - SETTING_NAMES == set()
    environment = _anchor("agent-memory-environment")
    keys = set(re.findall(r"(?m)^  ([A-Z][A-Z0-9_]*):", environment))
    assert keys - SETTING_NAMES == set()
    assert {"AM_DATABASE_URL", "AM_VALKEY_URL", "PUBSUB_EMULATOR_HOST"} <= keys
    # Authentication stays on unless the operator turns it off.
    assert "AM_AUTH_DISABLED: ${AM_AUTH_DISABLED:-false}" in environment


def test_compose_passes_every_setting_but_those_its_readme_names():
    # A setting added to the code and forgotten here could not be set under compose.
    text = COMPOSE.read_text(encoding="utf-8")
    used = set(re.findall(r"\b([A-Z][A-Z0-9_]+)\b", text))
    only_for_up = {
        "AM_DATA_DIR",
        "AM_POSTGRES_PORT",
        "AM_POSTGRES_SHARED_BUFFERS",
        "AM_PUBSUB_EMULATOR_BIN",
        "AM_PUBSUB_PORT",
        "AM_SCALE",  # compose has its own *_REPLICAS per kind
        "AM_VALKEY_PORT",
    }
    not_passed = {"AM_TRACING", "AM_DATABASE_IAM_AUTH"}  # infra/README.md says so
    # One environment for all of a service's replicas: host:pid names each (the container).
    not_passed.add("AM_REPLICA_NAME")
    assert SETTING_NAMES - used - only_for_up - not_passed == set()


def test_compose_commands_exist_in_the_cli():
    parser = build_parser()
    services = _compose_services()
    app_services = {name for name, block in services.items() if "<<: *agent-memory" in block}
    assert app_services == {"init", "api", *(f"{kind}-worker" for kind in WORKERS)}
    for name in app_services - {"init"}:
        argv = json.loads(re.search(r"command: (\[.*\])", services[name]).group(1))
        parser.parse_args(argv)
    # init's script: every agent-memory call in it.
    calls = re.findall(r"agent-memory ([a-z][^|)\n]*)", services["init"])
    commands = set()
    for call in calls:
        argv = shlex.split(re.sub(r"\$\$\w+", "x", call))
        parser.parse_args(argv)
        commands.add(" ".join(argv[:2]))
    assert {"migrate", "topology apply"} <= commands


def test_each_worker_kind_scales_on_its_own_variable():
    services = _compose_services()
    variables = set()
    for kind in WORKERS:
        block = services[f"{kind}-worker"]
        assert f'command: ["worker", "{kind}"]' in block
        variable = f"{kind.upper()}_REPLICAS"
        assert f"replicas: ${{{variable}:-1}}" in block
        variables.add(variable)
    assert len(variables) == len(WORKERS)


def test_compose_waits_for_healthy_components_and_init():
    services = _compose_services()
    for name in ("postgres", "valkey", "pubsub", "api", *(f"{k}-worker" for k in WORKERS)):
        assert "healthcheck:" in services[name], name
    stack = _anchor("stack-depends-on")
    assert "init:\n    condition: service_completed_successfully" in stack
    for component in ("postgres", "valkey", "pubsub"):
        assert f"{component}:\n    condition: service_healthy" in stack
    for name in ("api", *(f"{k}-worker" for k in WORKERS)):
        assert "depends_on: *stack-depends-on" in services[name]
    assert "condition: service_healthy" in services["init"]
    assert "pgvector/pgvector" in services["postgres"]
    assert "valkey/valkey" in services["valkey"]
    assert "gcr.io/google.com/cloudsdktool/google-cloud-cli:emulators" in services["pubsub"]
    assert "--host-port=0.0.0.0:8085" in services["pubsub"]
    # The API is published on the loopback interface unless told otherwise.
    assert '"${AM_API_HOST:-127.0.0.1}:${AM_API_PORT:-8080}:8080"' in services["api"]


# -- infra/Dockerfile -------------------------------------------------------------------


def _stages() -> list[str]:
    text = DOCKERFILE.read_text(encoding="utf-8")
    stages = re.split(r"(?m)^FROM ", text)[1:]
    assert len(stages) >= 2, "multi-stage"
    return stages


def test_final_stage_is_slim_non_root_and_without_build_tools():
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"(?m)^ARG PYTHON_IMAGE=python:3\.11-slim", text)
    final = _stages()[-1]
    assert final.startswith("${PYTHON_IMAGE}")
    users = re.findall(r"(?m)^USER (\S+)", final)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    instructions = "\n".join(line for line in final.splitlines() if not line.startswith("#"))
    for tool in ("gcc", "build-essential", "apt-get install", "pip install"):
        assert tool not in instructions
    assert "COPY --from=build /opt/venv /opt/venv" in final


def test_entrypoint_is_the_console_script(capsys: pytest.CaptureFixture[str]):
    text = DOCKERFILE.read_text(encoding="utf-8")
    entrypoint = json.loads(re.search(r"(?m)^ENTRYPOINT (\[.*\])$", text).group(1))
    assert entrypoint == ["agent-memory"]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["scripts"]["agent-memory"] == "services.cli:main"
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    for command in ("api", "worker", "migrate", "topology"):
        assert command in help_text


def test_build_stage_copies_what_the_wheel_needs():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {"pyproject.toml", pyproject["project"]["readme"], *wheel["packages"]}
    needed |= set(wheel.get("force-include", {}))
    copied = set()
    for line in re.findall(r"(?m)^COPY (?!--from)(.+)$", _stages()[0]):
        copied |= set(line.split()[:-1])
    assert needed <= copied
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert not needed & ignored
    assert "infra/mint_api_key.py" not in ignored
