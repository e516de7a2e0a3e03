# -- Where ----------------------------------------------------------------------
variable "project_id" {
  description = "The GCP project that holds everything (GOOGLE_CLOUD_PROJECT of every service)."
  type        = string
}

variable "region" {
  description = "Region of Cloud Run, AlloyDB, Memorystore, Cloud Scheduler and the subnet."
  type        = string
  default     = "us-central1"
}

variable "name" {
  description = "Prefix of every non-Pub/Sub resource (services, service accounts, secrets, network). Pub/Sub names use topic_prefix."
  type        = string
  default     = "agent-memory"

  validation {
    # Service account ids are 6-30 characters; the longest suffix here is "-extract".
    condition     = can(regex("^[a-z][a-z0-9-]{1,20}[a-z0-9]$", var.name))
    error_message = "name: 3-22 lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "image" {
  description = "The agent-memory container image (built from infra/Dockerfile), e.g. REGION-docker.pkg.dev/PROJECT/REPO/agent-memory:TAG."
  type        = string
}

variable "deletion_protection" {
  description = "Protect AlloyDB, Memorystore and the Cloud Run services and jobs from `terraform destroy`."
  type        = bool
  default     = true
}

# -- Pub/Sub topology (defaults come from topology.json, i.e. shared/config.py) --
variable "topic_prefix" {
  description = "Prefix of every topic, subscription and schema (AM_TOPIC_PREFIX). null: the default of shared/config.py (agent-memory-)."
  type        = string
  default     = null
}

variable "ack_deadline_seconds" {
  description = "Ack deadline of the worker subscriptions (AM_ACK_DEADLINE_SECONDS). null: the default of shared/config.py."
  type        = number
  default     = null
}

variable "max_delivery_attempts" {
  description = "Attempts before a worker dead-letters a message, 5-99 (AM_MAX_DELIVERY_ATTEMPTS; the subscriptions' dead-letter policy is one more). null: the default of shared/config.py."
  type        = number
  default     = null

  validation {
    condition     = var.max_delivery_attempts == null || (coalesce(var.max_delivery_attempts, 5) >= 5 && coalesce(var.max_delivery_attempts, 5) <= 99)
    error_message = "max_delivery_attempts must be between 5 and 99."
  }
}

variable "retry_min_backoff_seconds" {
  description = "Retry policy: first redelivery delay after a nack (AM_RETRY_MIN_BACKOFF_SECONDS). null: the default of shared/config.py."
  type        = number
  default     = null
}

variable "retry_max_backoff_seconds" {
  description = "Retry policy: longest redelivery delay (AM_RETRY_MAX_BACKOFF_SECONDS). null: the default of shared/config.py."
  type        = number
  default     = null
}

# -- Tenants ----------------------------------------------------------------------
variable "apps" {
  description = "The apps (tenants) to provision: one API-key secret and one nightly compaction job each. Lower-case letters, digits and hyphens (they become resource names)."
  type        = list(string)
  default     = ["default"]

  validation {
    condition     = alltrue([for app in var.apps : can(regex("^[a-z][a-z0-9-]{0,19}$", app))])
    error_message = "Each app must be 1-20 lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "api_key_readers" {
  description = "Per app, the principals (e.g. serviceAccount:agent@PROJECT.iam.gserviceaccount.com) that may read its API key from Secret Manager: the agent services that call the API."
  type        = map(list(string))
  default     = {}

  validation {
    condition     = alltrue([for app in keys(var.api_key_readers) : contains(var.apps, app)])
    error_message = "Every app in api_key_readers must be one of var.apps."
  }
}

# -- Providers (LLM and embeddings) ---------------------------------------------
variable "llm_provider" {
  description = "AM_LLM_PROVIDER: offline (no model) or gemini; rules is offline's former name."
  type        = string
  default     = "gemini"

  validation {
    condition     = contains(["offline", "rules", "gemini"], var.llm_provider)
    error_message = "llm_provider must be offline or gemini."
  }
}

variable "embedding_provider" {
  description = "AM_EMBEDDING_PROVIDER: hash (offline) or gemini."
  type        = string
  default     = "gemini"

  validation {
    condition     = contains(["hash", "gemini"], var.embedding_provider)
    error_message = "embedding_provider must be hash or gemini."
  }
}

variable "embedding_dim" {
  description = "AM_EMBEDDING_DIM: vector dimension of the embeddings column (768 for text-embedding-005). Fixed by the first migration."
  type        = number
  default     = 768
}

variable "gemini_api_key" {
  description = "A Gemini API key, stored in Secret Manager and given to the services as AM_GEMINI_API_KEY. null: Vertex AI with each service account (roles/aiplatform.user)."
  type        = string
  default     = null
  sensitive   = true
}

variable "settings" {
  description = "Further AM_* variables for every service and job (docs/configuration.md), e.g. { AM_SUMMARY_TRIGGER_TURNS = \"12\" }. Those this module sets itself cannot be overridden here."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for k in keys(var.settings) : can(regex("^AM_[A-Z0-9_]+$", k))])
    error_message = "settings keys must be AM_* variable names."
  }
}

# -- Scaling (each service on its own) ---------------------------------------------
variable "api_min_instances" {
  description = "Minimum instances of the API."
  type        = number
  default     = 1
}

variable "api_max_instances" {
  description = "Maximum instances of the API."
  type        = number
  default     = 10
}

variable "summary_min_instances" {
  description = "Minimum instances of the summary worker (at least 1: a worker pulls, nothing wakes it)."
  type        = number
  default     = 1

  validation {
    condition     = var.summary_min_instances >= 1
    error_message = "A worker needs at least one instance."
  }
}

variable "summary_max_instances" {
  description = "Maximum instances of the summary worker."
  type        = number
  default     = 5
}

variable "extraction_min_instances" {
  description = "Minimum instances of the extraction worker (at least 1)."
  type        = number
  default     = 1

  validation {
    condition     = var.extraction_min_instances >= 1
    error_message = "A worker needs at least one instance."
  }
}

variable "extraction_max_instances" {
  description = "Maximum instances of the extraction worker."
  type        = number
  default     = 5
}

variable "compaction_min_instances" {
  description = "Minimum instances of the compaction worker (at least 1)."
  type        = number
  default     = 1

  validation {
    condition     = var.compaction_min_instances >= 1
    error_message = "A worker needs at least one instance."
  }
}

variable "compaction_max_instances" {
  description = "Maximum instances of the compaction worker."
  type        = number
  default     = 2
}

variable "container_resources" {
  description = "CPU and memory limits of each service's container (api, summary, extraction, compaction, job)."
  type        = map(object({ cpu = string, memory = string }))
  default = {
    api        = { cpu = "2", memory = "1Gi" }
    summary    = { cpu = "1", memory = "512Mi" }
    extraction = { cpu = "1", memory = "1Gi" }
    compaction = { cpu = "1", memory = "1Gi" }
    job        = { cpu = "1", memory = "512Mi" }
  }
}

# -- The API's exposure -------------------------------------------------------------
variable "api_ingress" {
  description = "Cloud Run ingress of the API: INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  type        = string
  default     = "INGRESS_TRAFFIC_INTERNAL_ONLY"
}

variable "api_invokers" {
  description = "Principals given roles/run.invoker on the API (Cloud Run IAM, in front of the API keys). [\"allUsers\"] leaves the API keys as the only gate. Callers that use both send the ID token in X-Serverless-Authorization and the API key in Authorization."
  type        = list(string)
  default     = []
}

# -- Compaction schedule -------------------------------------------------------------
variable "compaction_schedule" {
  description = "Cron schedule (in compaction_time_zone) of the compaction sweep: per app, a compaction.requested.v1 without a user, published to compaction-requests."
  type        = string
  default     = "0 3 * * *"
}

variable "compaction_retention_days" {
  description = "Episodes older than this many days are folded by the scheduled sweep."
  type        = number
  default     = 30

  validation {
    condition     = var.compaction_retention_days >= 1
    error_message = "compaction_retention_days must be at least 1."
  }
}

variable "compaction_time_zone" {
  description = "Time zone of compaction_schedule."
  type        = string
  default     = "Etc/UTC"
}

# -- Data stores ---------------------------------------------------------------------
variable "alloydb_cpu_count" {
  description = "vCPUs of the AlloyDB primary instance (2, 4, 8, 16, ...)."
  type        = number
  default     = 2
}

variable "alloydb_availability_type" {
  description = "AlloyDB primary availability: REGIONAL (standby in another zone) or ZONAL."
  type        = string
  default     = "REGIONAL"
}

variable "valkey_node_type" {
  description = "Memorystore for Valkey node type (SHARED_CORE_NANO, STANDARD_SMALL, HIGHMEM_MEDIUM, ...)."
  type        = string
  default     = "STANDARD_SMALL"
}

variable "valkey_replica_count" {
  description = "Read replicas of the Valkey primary (0-5); with one or more, a failover keeps the buffer."
  type        = number
  default     = 1
}

variable "valkey_engine_version" {
  description = "Memorystore for Valkey engine version."
  type        = string
  default     = "VALKEY_8_0"
}

# -- Network -------------------------------------------------------------------------
variable "subnet_cidr" {
  description = "Range of the subnet that Cloud Run (Direct VPC egress) and Memorystore's Private Service Connect use (at least /26; Cloud Run takes up to two addresses per instance)."
  type        = string
  default     = "10.10.0.0/22"
}

variable "alloydb_peering_prefix_length" {
  description = "Size of the private services access range reserved for AlloyDB."
  type        = number
  default     = 20
}

variable "memory_change_webhooks" {
  description = "Push subscriptions on the memory-changes topic (memory.changed.v1): name => the HTTPS endpoint, the service account whose OIDC token Pub/Sub sends with each push, and an optional Pub/Sub filter (e.g. attributes.app = \"acme\": one tenant's changes only)."
  type = map(object({
    endpoint              = string
    service_account_email = string
    filter                = optional(string)
  }))
  default = {}
  validation {
    condition     = alltrue([for w in values(var.memory_change_webhooks) : startswith(w.endpoint, "https://")])
    error_message = "Each webhook endpoint must be an https:// URL."
  }
}
