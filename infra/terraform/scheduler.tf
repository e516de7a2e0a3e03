# Compaction on a schedule.
#
# Cloud Scheduler runs the job <name>-compact-<app>, which runs
# `agent-memory compact --all --app APP`: it lists the app's users with episodes
# older than AM_COMPACTION_RETENTION_DAYS and publishes one compaction.requested.v1
# per user, each with a new event_id and the run's created_at.
#
# Why not a Pub/Sub target publishing compaction.requested.v1 directly: a scheduler
# message has a fixed body and fixed attributes. The event names one user_id, its
# event_id is the compaction worker's idempotency key (the ledger would apply a
# fixed id once, ever) and its created_at fixes the retention cut-off (a fixed time
# would never move). infra/README.md describes the worker change that would make a
# Pub/Sub trigger possible.

resource "google_cloud_scheduler_job" "compaction" {
  for_each = toset(var.apps)

  name        = "${var.name}-compact-${each.key}"
  description = "agent-memory compact --all --app ${each.key}"
  region      = var.region
  schedule    = var.compaction_schedule
  time_zone   = var.compaction_time_zone

  retry_config {
    retry_count = 1
  }

  http_target {
    http_method = "POST"
    uri         = "https://run.googleapis.com/v2/projects/${var.project_id}/locations/${var.region}/jobs/${google_cloud_run_v2_job.job["compact-${each.key}"].name}:run"

    oauth_token {
      service_account_email = google_service_account.service["scheduler"].email
      scope                 = "https://www.googleapis.com/auth/cloud-platform"
    }
  }

  depends_on = [google_cloud_run_v2_job_iam_member.scheduler]
}

# roles/run.invoker on a job includes run.jobs.run: the scheduler may run the
# compaction jobs and nothing else.
resource "google_cloud_run_v2_job_iam_member" "scheduler" {
  for_each = toset(var.apps)

  name     = google_cloud_run_v2_job.job["compact-${each.key}"].name
  location = var.region
  role     = "roles/run.invoker"
  member   = google_service_account.service["scheduler"].member
}
