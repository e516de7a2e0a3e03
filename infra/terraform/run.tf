# Cloud Run: the API and one service per worker kind, each with its own service
# account, scaling bounds and container resources. All run the one image with a
# different command (`agent-memory api`, `agent-memory worker KIND`).
#
# Workers pull from Pub/Sub and serve no traffic: their CPU is always allocated
# (cpu_idle = false) and at least one instance runs (min >= 1); the only port is
# their Prometheus metrics (AM_METRICS_PORT), which is also what the startup probe
# waits for. Cloud Run sends SIGTERM and kills 10 s later; AM_WORKER_SHUTDOWN_SECONDS
# = 8 drains within that.

locals {
  container_port = 8080

  # Settings every process gets. The topology values must be the ones the
  # subscriptions were created with: a worker dead-letters a message itself on
  # its last allowed attempt (AM_MAX_DELIVERY_ATTEMPTS).
  common_env = merge(var.settings, {
    GOOGLE_CLOUD_PROJECT         = var.project_id
    AM_PUBSUB_BACKEND            = "gcp"
    AM_TOPIC_PREFIX              = local.topic_prefix
    AM_ACK_DEADLINE_SECONDS      = tostring(local.ack_deadline_seconds)
    AM_MAX_DELIVERY_ATTEMPTS     = tostring(local.max_delivery_attempts)
    AM_RETRY_MIN_BACKOFF_SECONDS = tostring(local.retry_min_backoff_seconds)
    AM_RETRY_MAX_BACKOFF_SECONDS = tostring(local.retry_max_backoff_seconds)
    AM_LLM_PROVIDER              = var.llm_provider
    AM_EMBEDDING_PROVIDER        = var.embedding_provider
    AM_EMBEDDING_DIM             = tostring(var.embedding_dim)
    AM_LOG_FORMAT                = "json"
  })

  worker_env = merge(local.common_env, {
    AM_METRICS_HOST            = "0.0.0.0"
    AM_METRICS_PORT            = tostring(local.container_port)
    AM_WORKER_SHUTDOWN_SECONDS = "8"
  })

  # Plain variables per process (services/worker.py: which worker uses Valkey; the
  # extraction and compaction workers do once AM_LLM_MAX_CALLS_PER_MINUTE is set,
  # for the limit they share across replicas).
  env = {
    api = merge(local.common_env, {
      AM_API_HOST   = "0.0.0.0"
      AM_API_PORT   = tostring(local.container_port)
      AM_VALKEY_URL = local.valkey_url
      # uvicorn's: take the scheme from Google's front end, which ends TLS and is
      # the only way in, so the console's cookies are the Secure __Host- ones.
      FORWARDED_ALLOW_IPS = "*"
    })
    summary    = merge(local.worker_env, { AM_VALKEY_URL = local.valkey_url })
    extraction = merge(local.worker_env, { AM_VALKEY_URL = local.valkey_url })
    compaction = merge(local.worker_env, { AM_VALKEY_URL = local.valkey_url })
    job        = local.common_env
  }

  # Variables from Secret Manager: name => secret id.
  gemini_secret = local.has_gemini_api_key ? { AM_GEMINI_API_KEY = google_secret_manager_secret.gemini_api_key[0].secret_id } : {}
  secret_env = {
    api        = merge({ AM_DATABASE_URL = google_secret_manager_secret.database_url.secret_id }, local.gemini_secret)
    summary    = local.gemini_secret
    extraction = merge({ AM_DATABASE_URL = google_secret_manager_secret.database_url.secret_id }, local.gemini_secret)
    compaction = merge({ AM_DATABASE_URL = google_secret_manager_secret.database_url.secret_id }, local.gemini_secret)
    job        = { AM_DATABASE_URL = google_secret_manager_secret.database_url.secret_id }
  }

  worker_scaling = {
    summary    = { min = var.summary_min_instances, max = var.summary_max_instances }
    extraction = { min = var.extraction_min_instances, max = var.extraction_max_instances }
    compaction = { min = var.compaction_min_instances, max = var.compaction_max_instances }
  }

  # Each process's variables in the order its container lists them: the plain
  # ones, then those read from Secret Manager (`secret` is the secret's id).
  container_env = {
    for process, plain in local.env : process => concat(
      [for name, value in plain : { name = name, value = value, secret = null }],
      [for name, secret in local.secret_env[process] : { name = name, value = null, secret = secret }],
    )
  }

  # The API, and one service per worker kind of topology.json (a kind without
  # scaling variables fails the plan). The API answers /healthz; a worker serves
  # only its metrics, which its startup probe waits for.
  services = merge(
    {
      api = {
        args     = ["api"]
        ingress  = var.api_ingress
        scaling  = { min = var.api_min_instances, max = var.api_max_instances }
        startup  = { path = "/healthz", attempts = 30 }
        liveness = { path = "/healthz", period = 15 }
      }
    },
    {
      for kind in keys(local.topology.workers) : kind => {
        args     = ["worker", kind]
        ingress  = "INGRESS_TRAFFIC_INTERNAL_ONLY"
        scaling  = local.worker_scaling[kind]
        startup  = { path = null, attempts = 60 }
        liveness = { path = "/metrics", period = 30 }
      }
    },
  )
}

resource "google_cloud_run_v2_service" "service" {
  for_each = local.services

  name                = "${var.name}-${each.key}"
  location            = var.region
  ingress             = each.value.ingress
  deletion_protection = var.deletion_protection

  template {
    service_account = google_service_account.service[each.key].email

    scaling {
      min_instance_count = each.value.scaling.min
      max_instance_count = each.value.scaling.max
    }

    vpc_access {
      egress = "PRIVATE_RANGES_ONLY"
      network_interfaces {
        network    = google_compute_network.vpc.id
        subnetwork = google_compute_subnetwork.main.id
      }
    }

    containers {
      image = var.image
      args  = each.value.args

      ports {
        container_port = local.container_port
      }

      resources {
        limits = var.container_resources[each.key]
        # A worker pulls between requests; the API's publisher sender thread and
        # the pools' maintenance work run between requests too.
        cpu_idle = false
      }

      startup_probe {
        period_seconds    = 2
        failure_threshold = each.value.startup.attempts
        dynamic "http_get" {
          for_each = each.value.startup.path[*]
          content {
            path = http_get.value
          }
        }
        dynamic "tcp_socket" {
          for_each = each.value.startup.path == null ? [local.container_port] : []
          content {
            port = tcp_socket.value
          }
        }
      }

      liveness_probe {
        period_seconds = each.value.liveness.period
        http_get {
          path = each.value.liveness.path
        }
      }

      dynamic "env" {
        for_each = local.container_env[each.key]
        content {
          name  = env.value.name
          value = env.value.value
          dynamic "value_source" {
            for_each = env.value.secret[*]
            content {
              secret_key_ref {
                secret  = value_source.value
                version = "latest"
              }
            }
          }
        }
      }
    }
  }

  depends_on = [
    google_pubsub_topic_iam_member.api_publisher,
    google_pubsub_topic_iam_member.api_readiness,
    google_pubsub_subscription_iam_member.worker_subscriber,
    google_pubsub_topic_iam_member.worker_publisher,
    google_secret_manager_secret_iam_member.database_url,
    google_secret_manager_secret_iam_member.gemini_api_key,
    google_secret_manager_secret_version.database_url,
  ]
}

# The API and the workers were two resources: their services keep their names.
moved {
  from = google_cloud_run_v2_service.api
  to   = google_cloud_run_v2_service.service["api"]
}

moved {
  from = google_cloud_run_v2_service.worker
  to   = google_cloud_run_v2_service.service
}

resource "google_cloud_run_v2_service_iam_member" "api_invoker" {
  for_each = toset(var.api_invokers)

  name     = google_cloud_run_v2_service.service["api"].name
  location = google_cloud_run_v2_service.service["api"].location
  role     = "roles/run.invoker"
  member   = each.key
}
