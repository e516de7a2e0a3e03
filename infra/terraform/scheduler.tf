# Compaction on a schedule.
#
# Per app, Cloud Scheduler publishes a fixed compaction.requested.v1 without a
# user_id (a sweep) to compaction-requests. The compaction worker takes the run's
# time from the message's publish time (the body's created_at is fixed), lists
# the app's users with episodes older than retention_days, and publishes one
# request per user whose id is derived from the sweep's id, that time and the
# user (services/compaction_worker/handlers.py): a redelivered sweep republishes
# the same requests, which the worker's ledger applies once.
#
# `gcloud run jobs execute <name>-compact-<app>` (jobs.tf) runs the same sweep on
# demand through `agent-memory compact --all`.

locals {
  compaction_sweeps = {
    for app in var.apps : app => {
      event_id = uuidv5("url", "https://agent-memory/compaction-sweep/${var.name}/${app}")
    }
  }
}

resource "google_cloud_scheduler_job" "compaction" {
  for_each = local.compaction_sweeps

  name        = "${var.name}-compact-${each.key}"
  description = "compaction sweep of app ${each.key}: compaction.requested.v1 without a user"
  region      = var.region
  schedule    = var.compaction_schedule
  time_zone   = var.compaction_time_zone

  retry_config {
    retry_count = 1
  }

  pubsub_target {
    topic_name = google_pubsub_topic.event["compaction-requests"].id
    data = base64encode(jsonencode({
      event_id       = each.value.event_id
      app            = each.key
      user_id        = ""
      project_id     = ""
      retention_days = var.compaction_retention_days
      batch_limit    = 50
      created_at     = "2026-01-01T00:00:00Z"
    }))
    # The attributes every event carries (shared/events/codec.py).
    attributes = {
      event_id       = each.value.event_id
      event_type     = "compaction.requested.v1"
      schema_version = "1"
      app            = each.key
    }
  }

  depends_on = [google_pubsub_topic_iam_member.scheduler_publisher]
}

# Cloud Scheduler publishes as its service agent.
resource "google_pubsub_topic_iam_member" "scheduler_publisher" {
  topic  = google_pubsub_topic.event["compaction-requests"].id
  role   = "roles/pubsub.publisher"
  member = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-cloudscheduler.iam.gserviceaccount.com"
}
