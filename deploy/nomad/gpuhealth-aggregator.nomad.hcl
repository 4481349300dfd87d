# The gpuhealth aggregator on Nomad: one instance of the central service (fleet state, incident history,
# drain permits, circuit breaker, alerts). Install steps: docs/nomad.md.
#
#   nomad var put nomad/jobs/gpuhealth-aggregator token=<random> [database_url=postgresql+psycopg://...]
#   nomad job run deploy/nomad/gpuhealth-aggregator.nomad.hcl

variable "image" {
  type        = string
  description = "The gpuhealth image, built from the repository's Dockerfile and pushed to your registry."
  default     = "ghcr.io/gpuhealth/gpuhealth:0.1.0"
}

job "gpuhealth-aggregator" {
  type        = "service"
  datacenters = ["*"]

  group "aggregator" {
    # One instance. With SQLite (the default) the database is a file on one node's host volume, so a second
    # instance could not share it; for high availability use PostgreSQL (database_url in the variable) —
    # the aggregator then keeps no state of its own and the group may run elsewhere after a failure.
    count = 1

    # The SQLite file. A host volume declared in the client configuration of the node that runs the
    # aggregator, owned by the image's user (uid 10001):
    #   host_volume "gpuhealth-aggregator" { path = "/var/lib/gpuhealth-aggregator" }
    # With PostgreSQL the volume is unused but harmless; remove it (and the volume_mount) to let the
    # aggregator run on any node.
    volume "data" {
      type      = "host"
      source    = "gpuhealth-aggregator"
      read_only = false
    }

    network {
      port "http" {
        to = 8470
      }
    }

    service {
      # Agents find the aggregator under this name (Nomad service discovery, see the agent's template).
      name     = "gpuhealth-aggregator"
      provider = "nomad"
      port     = "http"
      tags     = ["api", "metrics"]

      # Readiness: /readyz answers 200 only while the database answers; until then the service is not
      # offered to agents and a deployment does not count the allocation as healthy.
      check {
        name     = "ready"
        type     = "http"
        path     = "/readyz"
        interval = "10s"
        timeout  = "3s"
      }

      # Liveness: /healthz answers while the process serves; three failures in a row restart the task.
      check {
        name     = "alive"
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "3s"

        check_restart {
          limit = 3
          grace = "60s"
        }
      }
    }

    # A new version replaces the old one only once its checks pass; a version that never gets healthy is
    # rolled back.
    update {
      max_parallel     = 1
      health_check     = "checks"
      min_healthy_time = "10s"
      healthy_deadline = "3m"
      auto_revert      = true
    }

    task "aggregator" {
      driver = "docker"

      config {
        image = var.image
        args  = ["aggregator", "--config", "/local/aggregator.yaml"]
        ports = ["http"]

        security_opt    = ["no-new-privileges"]
        readonly_rootfs = true
        cap_drop        = ["all"]

        mount {
          type     = "tmpfs"
          target   = "/tmp"
          readonly = false
          tmpfs_options {
            size = 67108864
          }
        }
      }

      volume_mount {
        volume      = "data"
        destination = "/var/lib/gpuhealth-aggregator"
      }

      # Settings without secrets (keys: docs/configuration.md). Every key can be overridden by a
      # GPUHEALTH_AGGREGATOR_* variable, which is how the secrets below arrive.
      template {
        destination = "local/aggregator.yaml"
        change_mode = "restart"
        data        = <<-EOT
          aggregator:
            host: 0.0.0.0
            port: 8470
            database_url: sqlite:////var/lib/gpuhealth-aggregator/aggregator.db
          EOT
      }

      # The API token, and optionally a PostgreSQL URL (it holds a password), from the Nomad variable
      # nomad/jobs/gpuhealth-aggregator, which this job's workload identity may read without any policy.
      # Rendered into the secrets directory and handed to the process as environment variables, never
      # written in the job itself. The task waits until the variable exists.
      template {
        destination = "secrets/aggregator.env"
        perms       = "0400"
        env         = true
        change_mode = "restart"
        data        = <<-EOT
          {{- with nomadVar "nomad/jobs/gpuhealth-aggregator" }}
          GPUHEALTH_AGGREGATOR_TOKEN={{ .token }}
          {{- range $key, $value := . }}{{ if eq $key "database_url" }}
          GPUHEALTH_AGGREGATOR_DATABASE_URL={{ $value }}
          {{- end }}{{ end }}
          {{- end }}
          EOT
      }

      resources {
        cpu        = 500
        memory     = 256
        memory_max = 512
      }

      kill_timeout = "30s"
    }
  }
}
