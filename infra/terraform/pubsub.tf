# The Pub/Sub topology, exactly as `agent-memory topology apply` creates it
# (shared/bus/admin.py): per event type an Avro schema (JSON encoding) attached to
# its topic; per subscription a dead-letter topic `<subscription>-dlq` with a pull
# subscription of the same name, a retry policy and a maximum delivery count.
#
# No subscription expires (as `topology apply` sets them too): a dead-letter
# subscription is idle most of the time, and a dead-letter topic without a
# subscription loses what it receives.

resource "google_pubsub_schema" "event" {
  for_each = local.topology.topics

  name       = "${local.topic_prefix}${each.value.schema}"
  type       = "AVRO"
  definition = file("${path.module}/../../${each.value.schema_file}")

  depends_on = [google_project_service.enabled]
}

resource "google_pubsub_topic" "event" {
  for_each = local.topology.topics

  name = "${local.topic_prefix}${each.key}"

  schema_settings {
    schema   = google_pubsub_schema.event[each.key].id
    encoding = "JSON"
  }
}

resource "google_pubsub_topic" "dead_letter" {
  for_each = local.topology.subscriptions

  name = "${local.topic_prefix}${each.value.dead_letter}"

  depends_on = [google_project_service.enabled]
}

resource "google_pubsub_subscription" "worker" {
  for_each = local.topology.subscriptions

  name                    = "${local.topic_prefix}${each.key}"
  topic                   = google_pubsub_topic.event[each.value.topic].id
  enable_message_ordering = each.value.ordered
  ack_deadline_seconds    = local.ack_deadline_seconds

  # One more delivery than the workers' AM_MAX_DELIVERY_ATTEMPTS: on that extra one
  # the worker dead-letters, with a reason, a message it never settled.
  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter[each.key].id
    max_delivery_attempts = local.max_delivery_attempts + 1
  }

  retry_policy {
    minimum_backoff = "${local.retry_min_backoff_seconds}s"
    maximum_backoff = "${local.retry_max_backoff_seconds}s"
  }

  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_subscription" "dead_letter" {
  for_each = local.topology.subscriptions

  name                 = "${local.topic_prefix}${each.value.dead_letter}"
  topic                = google_pubsub_topic.dead_letter[each.key].id
  ack_deadline_seconds = local.dead_letter_ack_deadline_seconds

  expiration_policy {
    ttl = ""
  }
}

# Dead-lettering: the Pub/Sub service agent publishes to each dead-letter topic and
# acknowledges (subscribes to) the source subscription. Without these, messages past
# max_delivery_attempts are redelivered forever.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  for_each = local.topology.subscriptions

  topic  = google_pubsub_topic.dead_letter[each.key].id
  role   = "roles/pubsub.publisher"
  member = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  for_each = local.topology.subscriptions

  subscription = google_pubsub_subscription.worker[each.key].id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}

# Webhooks on memory changes (docs/operations.md, "Memory change events"): one push
# subscription per entry of var.memory_change_webhooks, ordered per user, with a
# dead-letter topic of its own so that an endpoint that keeps failing loses nothing.
resource "google_pubsub_topic" "webhook_dead_letter" {
  for_each = var.memory_change_webhooks

  name = "${local.topic_prefix}memory-changes-${each.key}-dlq"

  depends_on = [google_project_service.enabled]
}

resource "google_pubsub_subscription" "webhook" {
  for_each = var.memory_change_webhooks

  name                    = "${local.topic_prefix}memory-changes-${each.key}"
  topic                   = google_pubsub_topic.event["memory-changes"].id
  enable_message_ordering = true
  # Every app's changes, memory texts included, unless the filter narrows it.
  filter = each.value.filter
  ack_deadline_seconds    = local.ack_deadline_seconds

  push_config {
    push_endpoint = each.value.endpoint
    oidc_token {
      service_account_email = each.value.service_account_email
      audience              = each.value.endpoint
    }
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.webhook_dead_letter[each.key].id
    max_delivery_attempts = local.max_delivery_attempts
  }

  retry_policy {
    minimum_backoff = "${local.retry_min_backoff_seconds}s"
    maximum_backoff = "${local.retry_max_backoff_seconds}s"
  }

  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_subscription" "webhook_dead_letter" {
  for_each = var.memory_change_webhooks

  name                 = "${local.topic_prefix}memory-changes-${each.key}-dlq"
  topic                = google_pubsub_topic.webhook_dead_letter[each.key].id
  ack_deadline_seconds = local.dead_letter_ack_deadline_seconds

  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_topic_iam_member" "webhook_dead_letter_publisher" {
  for_each = var.memory_change_webhooks

  topic  = google_pubsub_topic.webhook_dead_letter[each.key].id
  role   = "roles/pubsub.publisher"
  member = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "webhook_subscriber" {
  for_each = var.memory_change_webhooks

  subscription = google_pubsub_subscription.webhook[each.key].id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}

# Pub/Sub mints the OIDC token of each webhook's service account.
resource "google_service_account_iam_member" "webhook_token_creator" {
  for_each = var.memory_change_webhooks

  service_account_id = "projects/${var.project_id}/serviceAccounts/${each.value.service_account_email}"
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agent
}
