output "api_url" {
  description = "URL of the API (Cloud Run)."
  value       = google_cloud_run_v2_service.service["api"].uri
}

output "service_accounts" {
  description = "Service account email of each service and job identity."
  value       = { for k, sa in google_service_account.service : k => sa.email }
}

output "topics" {
  description = "Full topic ids: the event topics and the dead-letter topics."
  value = merge(
    { for k, t in google_pubsub_topic.event : k => t.id },
    { for k, t in google_pubsub_topic.dead_letter : "${k}-dlq" => t.id },
  )
}

output "subscriptions" {
  description = "Full subscription ids: the workers' and the dead-letter pull subscriptions."
  value = merge(
    { for k, s in google_pubsub_subscription.worker : k => s.id },
    { for k, s in google_pubsub_subscription.dead_letter : "${k}-dlq" => s.id },
  )
}

output "topology_settings" {
  description = "The AM_* topology variables the services run with (give the same to `agent-memory topology show` or `dlq` from a workstation)."
  value = {
    GOOGLE_CLOUD_PROJECT         = var.project_id
    AM_PUBSUB_BACKEND            = "gcp"
    AM_TOPIC_PREFIX              = local.topic_prefix
    AM_ACK_DEADLINE_SECONDS      = local.ack_deadline_seconds
    AM_MAX_DELIVERY_ATTEMPTS     = local.max_delivery_attempts
    AM_RETRY_MIN_BACKOFF_SECONDS = local.retry_min_backoff_seconds
    AM_RETRY_MAX_BACKOFF_SECONDS = local.retry_max_backoff_seconds
  }
}

output "alloydb_instance" {
  description = "The AlloyDB primary instance (name and private IP)."
  value = {
    name       = google_alloydb_instance.primary.name
    ip_address = google_alloydb_instance.primary.ip_address
  }
}

output "valkey_url" {
  description = "AM_VALKEY_URL of the Memorystore for Valkey primary endpoint (private)."
  value       = local.valkey_url
}

output "database_url_secret" {
  description = "Secret Manager secret holding AM_DATABASE_URL."
  value       = google_secret_manager_secret.database_url.id
}

output "api_key_secrets" {
  description = "Per app, the Secret Manager secret that its API-key job fills."
  value       = { for app, s in google_secret_manager_secret.api_key : app => s.id }
}

output "next_steps" {
  description = "Commands to run after the first apply (and after each image change, the migration)."
  value = join("\n", concat(
    ["gcloud run jobs execute ${google_cloud_run_v2_job.job["migrate"].name} --region ${var.region} --wait"],
    [for app in var.apps : "gcloud run jobs execute ${google_cloud_run_v2_job.job["api-key-${app}"].name} --region ${var.region} --wait"],
  ))
}
