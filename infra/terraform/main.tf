# agent-memory on GCP: Pub/Sub topology, AlloyDB, Memorystore for Valkey, Cloud Run,
# Cloud Scheduler and Secret Manager. See infra/README.md.

data "google_project" "this" {
  project_id = var.project_id
}

locals {
  # The topology `agent-memory topology apply` creates, exported from
  # shared/bus/topology.py by infra/export_topology.py (tests/unit/test_infra.py
  # checks that the file is current).
  topology = jsondecode(file("${path.module}/topology.json"))
  defaults = local.topology.defaults

  topic_prefix              = coalesce(var.topic_prefix, local.defaults.topic_prefix)
  ack_deadline_seconds      = coalesce(var.ack_deadline_seconds, local.defaults.ack_deadline_seconds)
  max_delivery_attempts     = coalesce(var.max_delivery_attempts, local.defaults.max_delivery_attempts)
  retry_min_backoff_seconds = coalesce(var.retry_min_backoff_seconds, local.defaults.retry_min_backoff_seconds)
  # As in shared/bus/admin.py: the maximum is never below the minimum.
  retry_max_backoff_seconds = max(
    coalesce(var.retry_max_backoff_seconds, local.defaults.retry_max_backoff_seconds),
    local.retry_min_backoff_seconds,
  )
  dead_letter_ack_deadline_seconds = local.topology.dead_letter_ack_deadline_seconds

  workers = toset(["summary", "extraction", "compaction"])

  uses_gemini = var.llm_provider == "gemini" || var.embedding_provider == "gemini"
  vertex_ai   = local.uses_gemini && !local.has_gemini_api_key

  # The Pub/Sub service agent: it moves messages to the dead-letter topics.
  pubsub_service_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
}

resource "google_project_service" "enabled" {
  for_each = toset(concat(
    [
      "alloydb.googleapis.com",
      "cloudscheduler.googleapis.com",
      "compute.googleapis.com",
      "iam.googleapis.com",
      "memorystore.googleapis.com",
      "networkconnectivity.googleapis.com",
      "pubsub.googleapis.com",
      "run.googleapis.com",
      "secretmanager.googleapis.com",
      "servicenetworking.googleapis.com",
    ],
    local.vertex_ai ? ["aiplatform.googleapis.com"] : [],
  ))

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}
