# Cloud Run jobs: the one-shot commands, run from the same image.
#
#   <name>-migrate            agent-memory migrate (run once after each apply that
#                             changes the image: gcloud run jobs execute ... --wait)
#   <name>-api-key-<app>      mints an API key of the app and stores it as a new
#                             version of the secret <name>-api-key-<app>
#   <name>-compact-<app>      agent-memory compact --all --app APP, on demand (the
#                             schedule publishes a sweep instead: scheduler.tf)
#
# The Pub/Sub topology is this module's (pubsub.tf), so `agent-memory topology
# apply` is not run in GCP; `agent-memory topology show` with the services'
# variables confirms that both agree.

locals {
  jobs = merge(
    {
      migrate = {
        account = "ops"
        command = null
        args    = ["migrate"]
      }
    },
    {
      for app in var.apps : "api-key-${app}" => {
        account = "ops"
        command = ["python", "/opt/agent-memory/mint_api_key.py"]
        args    = ["--app", app, "--secret", google_secret_manager_secret.api_key[app].id]
      }
    },
    {
      for app in var.apps : "compact-${app}" => {
        account = "sweep"
        command = null
        args    = ["compact", "--all", "--app", app]
      }
    },
  )
}

resource "google_cloud_run_v2_job" "job" {
  for_each = local.jobs

  name                = "${var.name}-${each.key}"
  location            = var.region
  deletion_protection = var.deletion_protection

  template {
    task_count = 1

    template {
      service_account = google_service_account.service[each.value.account].email
      max_retries     = 1
      timeout         = "1800s"

      vpc_access {
        egress = "PRIVATE_RANGES_ONLY"
        network_interfaces {
          network    = google_compute_network.vpc.id
          subnetwork = google_compute_subnetwork.main.id
        }
      }

      containers {
        image   = var.image
        command = each.value.command
        args    = each.value.args

        resources {
          limits = var.container_resources["job"]
        }

        dynamic "env" {
          for_each = local.container_env.job
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
  }

  depends_on = [
    google_secret_manager_secret_iam_member.database_url,
    google_secret_manager_secret_iam_member.api_key_adder,
    google_secret_manager_secret_version.database_url,
    google_pubsub_topic_iam_member.sweep_publisher,
  ]
}
