# One service account per service, each with only what its process calls:
#
#   api         publishes to the event topics and memory-changes (never subscribes); reads the turns
#               topic (its /readyz asks Pub/Sub for it); reads the database URL
#   summary     consumes turns-summary; publishes to turns-summary-dlq (it
#               dead-letters itself on the last allowed attempt)
#   extraction  consumes turns-extraction, extraction-requests and
#               memory-generate-extraction; publishes to their dead-letter topics
#               and to extraction-requests (a window closes); to memory-changes (the
#               changes it made); reads the database URL
#   compaction  consumes compaction-requests; publishes to its dead-letter topic,
#               to compaction-requests (continuations) and to memory-changes;
#               reads the database URL
#   ops         the migrate and API-key jobs: reads the database URL, adds API-key
#               secret versions
#   sweep       the on-demand compaction job: reads the database URL (to list the
#               users with old episodes), publishes compaction requests
# (Cloud Scheduler publishes the scheduled sweep as its own service agent:
# scheduler.tf.)

locals {
  service_accounts = {
    api        = "API"
    summary    = "summary worker"
    extraction = "extraction worker"
    compaction = "compaction worker"
    ops        = "migrate and API-key jobs"
    sweep      = "on-demand compaction job"
  }
  # Account ids: <name>-<suffix>, at most 30 characters (var.name is at most 22).
  account_suffix = {
    api        = "api"
    summary    = "summary"
    extraction = "extract"
    compaction = "compact"
    ops        = "ops"
    sweep      = "sweep"
  }

  # Topics each identity may publish to (short topic names as in topology.json).
  api_publishes = [
    "turns", "memory-generate", "compaction-requests", "extraction-requests", "memory-changes",
  ]
  # A worker publishes to its subscriptions' dead-letter topics (it dead-letters a
  # message itself on the last allowed attempt); the compaction worker also to its
  # own topic (continuations), the extraction worker to extraction-requests (a
  # window closes).
  requests_topics = ["compaction-requests", "extraction-requests"]
  # The workers that change memories publish their changes (memory.changed.v1).
  change_publishers = ["extraction", "compaction"]
  worker_publishes = merge(
    {
      for sub, spec in local.topology.subscriptions : "${spec.consumer}/${spec.dead_letter}" => {
        consumer = spec.consumer
        topic_id = google_pubsub_topic.dead_letter[sub].id
      }
    },
    {
      for sub, spec in local.topology.subscriptions : "${spec.consumer}/${spec.topic}" => {
        consumer = spec.consumer
        topic_id = google_pubsub_topic.event[spec.topic].id
      } if contains(local.requests_topics, spec.topic)
    },
    {
      for consumer in local.change_publishers : "${consumer}/memory-changes" => {
        consumer = consumer
        topic_id = google_pubsub_topic.event["memory-changes"].id
      }
    },
  )

  # Processes that call Vertex AI (LLM or embeddings), per shared/bootstrap.py and
  # services/worker.py: the API (query embeddings, decomposition) and every worker.
  vertex_ai_users = ["api", "summary", "extraction", "compaction"]
  # Processes that use Postgres.
  database_users = ["api", "extraction", "compaction", "ops", "sweep"]
}

resource "google_service_account" "service" {
  for_each = local.service_accounts

  account_id   = "${var.name}-${local.account_suffix[each.key]}"
  display_name = "agent-memory ${each.value}"

  depends_on = [google_project_service.enabled]
}

# -- Pub/Sub -------------------------------------------------------------------------
resource "google_pubsub_topic_iam_member" "api_publisher" {
  for_each = toset(local.api_publishes)

  topic  = google_pubsub_topic.event[each.key].id
  role   = "roles/pubsub.publisher"
  member = google_service_account.service["api"].member
}

# /readyz checks Pub/Sub with a GetTopic on the turns topic; publisher alone may not.
resource "google_pubsub_topic_iam_member" "api_readiness" {
  topic  = google_pubsub_topic.event["turns"].id
  role   = "roles/pubsub.viewer"
  member = google_service_account.service["api"].member
}

resource "google_pubsub_subscription_iam_member" "worker_subscriber" {
  for_each = local.topology.subscriptions

  subscription = google_pubsub_subscription.worker[each.key].id
  role         = "roles/pubsub.subscriber"
  member       = google_service_account.service[each.value.consumer].member
}

resource "google_pubsub_topic_iam_member" "worker_publisher" {
  for_each = local.worker_publishes

  topic  = each.value.topic_id
  role   = "roles/pubsub.publisher"
  member = google_service_account.service[each.value.consumer].member
}

resource "google_pubsub_topic_iam_member" "sweep_publisher" {
  topic  = google_pubsub_topic.event["compaction-requests"].id
  role   = "roles/pubsub.publisher"
  member = google_service_account.service["sweep"].member
}

# -- Vertex AI (only when Gemini runs on Vertex AI rather than with an API key) -----
resource "google_project_iam_member" "vertex_ai" {
  for_each = local.vertex_ai ? toset(local.vertex_ai_users) : toset([])

  project = var.project_id
  role    = "roles/aiplatform.user"
  member  = google_service_account.service[each.key].member
}

# -- AlloyDB IAM database authentication ---------------------------------------------
# Each Postgres-using service account may log in as its own IAM database user
# (alloydb.tf): alloydb.users.login and serviceusage.services.use. The services
# still connect with the database URL's password; AM_DATABASE_IAM_AUTH=true with
# the IAM user's URL switches one to a token login (docs/operations.md).
resource "google_project_iam_member" "alloydb_database_user" {
  for_each = toset(local.database_users)

  project = var.project_id
  role    = "roles/alloydb.databaseUser"
  member  = google_service_account.service[each.key].member
}

resource "google_project_iam_member" "service_usage_consumer" {
  for_each = toset(local.database_users)

  project = var.project_id
  role    = "roles/serviceusage.serviceUsageConsumer"
  member  = google_service_account.service[each.key].member
}
