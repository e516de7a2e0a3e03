# AlloyDB for PostgreSQL: the long-term store. pgvector is AlloyDB's `vector`
# extension; the first migration (`agent-memory migrate`, the migrate job) creates
# it with CREATE EXTENSION. IAM database authentication is on, with one IAM
# database user per service account that uses Postgres.

resource "random_password" "postgres" {
  length  = 32
  special = false # it goes into a URL unescaped
}

resource "google_alloydb_cluster" "main" {
  cluster_id          = var.name
  location            = var.region
  deletion_protection = var.deletion_protection

  network_config {
    network = google_compute_network.vpc.id
  }

  initial_user {
    user     = "postgres"
    password = random_password.postgres.result
  }

  depends_on = [google_service_networking_connection.alloydb]
}

resource "google_alloydb_instance" "primary" {
  cluster           = google_alloydb_cluster.main.name
  instance_id       = "${var.name}-primary"
  instance_type     = "PRIMARY"
  availability_type = var.alloydb_availability_type

  machine_config {
    cpu_count = var.alloydb_cpu_count
  }

  database_flags = {
    "alloydb.iam_authentication" = "on"
  }
}

# IAM database users (user name: the service account's email without
# ".gserviceaccount.com"). They log in with a short-lived token when a service runs
# with AM_DATABASE_IAM_AUTH=true; they need GRANTs on the tables first.
resource "google_alloydb_user" "service" {
  for_each = toset(local.database_users)

  cluster   = google_alloydb_cluster.main.name
  user_id   = trimsuffix(google_service_account.service[each.key].email, ".gserviceaccount.com")
  user_type = "ALLOYDB_IAM_USER"

  depends_on = [google_alloydb_instance.primary]
}

locals {
  # The database URL every Postgres-using process reads (AM_DATABASE_URL), from
  # Secret Manager. AlloyDB accepts encrypted connections only.
  database_url = format(
    "postgresql://postgres:%s@%s:5432/postgres?sslmode=require",
    random_password.postgres.result,
    google_alloydb_instance.primary.ip_address,
  )
}
