# Secret Manager: what the processes must not see in plain configuration.
#
#   <name>-database-url     AM_DATABASE_URL (AlloyDB's generated password inside)
#   <name>-gemini-api-key   AM_GEMINI_API_KEY, only when var.gemini_api_key is set
#   <name>-api-key-<app>    an API key of each app, for the agent services that call
#                           the API. The API itself never reads these: it checks
#                           keys against their SHA-256 in Postgres. The job
#                           <name>-api-key-<app> (jobs.tf) mints a key and adds it
#                           here as a new version, so the key is never printed.

locals {
  has_gemini_api_key = nonsensitive(var.gemini_api_key != null)
}

resource "google_secret_manager_secret" "database_url" {
  secret_id = "${var.name}-database-url"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

resource "google_secret_manager_secret_version" "database_url" {
  secret      = google_secret_manager_secret.database_url.id
  secret_data = local.database_url
}

resource "google_secret_manager_secret_iam_member" "database_url" {
  for_each = toset(local.database_users)

  secret_id = google_secret_manager_secret.database_url.id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.service[each.key].member
}

resource "google_secret_manager_secret" "gemini_api_key" {
  count = local.has_gemini_api_key ? 1 : 0

  secret_id = "${var.name}-gemini-api-key"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

resource "google_secret_manager_secret_version" "gemini_api_key" {
  count = local.has_gemini_api_key ? 1 : 0

  secret      = google_secret_manager_secret.gemini_api_key[0].id
  secret_data = var.gemini_api_key
}

resource "google_secret_manager_secret_iam_member" "gemini_api_key" {
  for_each = local.has_gemini_api_key ? toset(local.vertex_ai_users) : toset([])

  secret_id = google_secret_manager_secret.gemini_api_key[0].id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.service[each.key].member
}

resource "google_secret_manager_secret" "api_key" {
  for_each = toset(var.apps)

  secret_id = "${var.name}-api-key-${each.key}"
  labels = {
    app = each.key
  }

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

# The API-key job adds versions (it cannot read them back).
resource "google_secret_manager_secret_iam_member" "api_key_adder" {
  for_each = toset(var.apps)

  secret_id = google_secret_manager_secret.api_key[each.key].id
  role      = "roles/secretmanager.secretVersionAdder"
  member    = google_service_account.service["ops"].member
}

resource "google_secret_manager_secret_iam_member" "api_key_reader" {
  for_each = {
    for pair in flatten([
      for app, members in var.api_key_readers : [
        for member in members : { app = app, member = member }
      ]
    ]) : "${pair.app}/${pair.member}" => pair
  }

  secret_id = google_secret_manager_secret.api_key[each.value.app].id
  role      = "roles/secretmanager.secretAccessor"
  member    = each.value.member
}
