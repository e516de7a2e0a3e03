# Memorystore for Valkey: the short-term store (session buffers, rolling summaries,
# allow-once grants). Cluster mode off: the services use a plain Valkey client
# (every session's keys share a hash tag, so turning cluster mode on later needs a
# cluster-aware client, not new keys).
#
# No AUTH and no in-transit encryption: the instance is reachable only from this
# VPC, and AM_VALKEY_URL has no way yet to carry a CA certificate or an IAM token.

resource "google_memorystore_instance" "valkey" {
  instance_id                 = var.name
  location                    = var.region
  mode                        = "CLUSTER_DISABLED"
  shard_count                 = 1
  replica_count               = var.valkey_replica_count
  node_type                   = var.valkey_node_type
  engine_version              = var.valkey_engine_version
  authorization_mode          = "AUTH_DISABLED"
  transit_encryption_mode     = "TRANSIT_ENCRYPTION_DISABLED"
  deletion_protection_enabled = var.deletion_protection

  desired_auto_created_endpoints {
    network    = google_compute_network.vpc.id
    project_id = var.project_id
  }

  depends_on = [google_network_connectivity_service_connection_policy.valkey]
}

locals {
  valkey_primary = one([
    for connection in flatten([
      for endpoint in google_memorystore_instance.valkey.endpoints : [
        for c in endpoint.connections : c.psc_auto_connection
      ]
    ]) : connection if connection.connection_type == "CONNECTION_TYPE_PRIMARY"
  ])
  valkey_url = "redis://${local.valkey_primary.ip_address}:${local.valkey_primary.port}/0"
}
