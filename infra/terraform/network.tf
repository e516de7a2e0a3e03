# A private network for the data stores. Cloud Run reaches it with Direct VPC
# egress (private ranges only; Google APIs such as Pub/Sub stay on the default
# path); AlloyDB through private services access; Memorystore for Valkey through
# Private Service Connect (a service connection policy on the same subnet).

resource "google_compute_network" "vpc" {
  name                    = var.name
  auto_create_subnetworks = false

  depends_on = [google_project_service.enabled]
}

resource "google_compute_subnetwork" "main" {
  name                     = "${var.name}-${var.region}"
  region                   = var.region
  network                  = google_compute_network.vpc.id
  ip_cidr_range            = var.subnet_cidr
  private_ip_google_access = true
}

resource "google_compute_global_address" "alloydb" {
  name          = "${var.name}-alloydb"
  purpose       = "VPC_PEERING"
  address_type  = "INTERNAL"
  prefix_length = var.alloydb_peering_prefix_length
  network       = google_compute_network.vpc.id
}

resource "google_service_networking_connection" "alloydb" {
  network                 = google_compute_network.vpc.id
  service                 = "servicenetworking.googleapis.com"
  reserved_peering_ranges = [google_compute_global_address.alloydb.name]
}

resource "google_network_connectivity_service_connection_policy" "valkey" {
  name          = "${var.name}-valkey"
  location      = var.region
  service_class = "gcp-memorystore"
  network       = google_compute_network.vpc.id

  psc_config {
    subnetworks = [google_compute_subnetwork.main.id]
  }
}
