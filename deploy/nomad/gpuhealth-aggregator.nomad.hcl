# The gpuhealth aggregator on Nomad: one instance of the central service (fleet state, incident history,
# drain permits, circuit breaker, alerts), over HTTPS. Install steps: docs/nomad.md.
#
#   nomad var put nomad/jobs/gpuhealth-aggregator token=<random, 32+ characters> \
#       metrics_token=<random, 32+ characters> [database_url=postgresql+psycopg://...]
#   nomad var put nomad/jobs/gpuhealth-aggregator/tls cert=@server.pem key=@server-key.pem
#   nomad acl policy apply -namespace default -job gpuhealth-aggregator gpuhealth-aggregator \
#       deploy/nomad/gpuhealth-aggregator.policy.hcl
#   nomad acl policy apply -namespace default -job gpuhealth-aggregator gpuhealth-remediator \
#       deploy/nomad/gpuhealth-remediator.policy.hcl
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
      # The checks speak HTTPS like every client; they send no token, so the certificate is not checked
      # here (the agents and people verify it with the CA).
      check {
        name            = "ready"
        type            = "http"
        protocol        = "https"
        tls_skip_verify = true
        path            = "/readyz"
        interval        = "10s"
        timeout         = "3s"
      }

      # Liveness: /healthz answers while the process serves; three failures in a row restart the task.
      check {
        name            = "alive"
        type            = "http"
        protocol        = "https"
        tls_skip_verify = true
        path            = "/healthz"
        interval        = "10s"
        timeout         = "3s"

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

      # The aggregator's own Nomad credential: this task's workload identity (secrets/nomad_token), which the
      # ACL policy in gpuhealth-aggregator.policy.hcl lets read allocations, to find the node an agent's
      # identity belongs to. No long-lived token is created or stored.
      identity {
        file        = true
        change_mode = "restart"
      }

      env {
        # The local Nomad client's HTTP API: the servers' keys (/.well-known/jwks.json) and the agents'
        # allocations, forwarded to the servers. Not a secret; every secret is a file below.
        GPUHEALTH_AGGREGATOR_NOMAD_ADDRESS = "http://${attr.unique.network.ip-address}:4646"
      }

      # Settings (keys: docs/configuration.md). Every secret is a file in the task's secrets directory,
      # rendered from Nomad variables by the templates below, never an environment variable (which
      # `docker inspect` shows and every child process inherits) and never written in the job itself.
      template {
        destination = "local/aggregator.yaml"
        change_mode = "restart"
        data        = <<-EOT
          aggregator:
            host: 0.0.0.0
            port: 8470
            shared_token_file: /secrets/token
            tls_cert_file: /secrets/tls.crt
            tls_key_file: /secrets/tls.key
            metrics_token_file: /secrets/metrics-token
            database_url_file: /secrets/database-url
            # Agents authenticate with their Nomad workload identity (audience gpuhealth-aggregator),
            # checked against the servers' keys (nomad_address comes from the environment above).
            nomad_token_file: /secrets/nomad_token
            nomad_audience: gpuhealth-aggregator
            nomad_agent_jobs: [gpuhealth-agent]
            # The central remediator (docs/drain.md, "The central remediator"): drains nodes and restarts
            # their batch jobs on the permits this aggregator grants, through the local client (forwarded
            # to the servers) with this task's identity, which the gpuhealth-remediator policy lets do
            # that. Agents with drain on order their own node's drain (drain_by: aggregator).
            remediator:
              orchestrator: nomad
              name: gpuhealth-aggregator
              nomad:
                address: http://{{ env "NOMAD_HOST_IP_http" }}:4646
                namespace: default
                token_file: /secrets/nomad_token
          EOT
      }

      # The deprecated shared token (the on-call side's admin token until people have their own) and the
      # scraper's token, good for /metrics only.
      template {
        destination = "secrets/token"
        perms       = "0400"
        change_mode = "restart"
        data        = <<-EOT
          {{- with nomadVar "nomad/jobs/gpuhealth-aggregator" }}{{ .token }}{{ end }}
          EOT
      }

      template {
        destination = "secrets/metrics-token"
        perms       = "0400"
        change_mode = "restart"
        data        = <<-EOT
          {{- with nomadVar "nomad/jobs/gpuhealth-aggregator" }}{{ .metrics_token }}{{ end }}
          EOT
      }

      # The database: the variable's database_url when it has one (PostgreSQL; the URL holds a password),
      # else the SQLite file on the host volume.
      template {
        destination = "secrets/database-url"
        perms       = "0400"
        change_mode = "restart"
        data        = <<-EOT
          {{- $url := "sqlite:////var/lib/gpuhealth-aggregator/aggregator.db" }}
          {{- with nomadVar "nomad/jobs/gpuhealth-aggregator" }}{{ range $key, $value := . }}{{ if eq $key "database_url" }}{{ $url = $value }}{{ end }}{{ end }}{{ end }}
          {{- $url }}
          EOT
      }

      # The serving certificate and its key, from nomad/jobs/gpuhealth-aggregator/tls (this job's identity
      # may read it without any policy). The certificate must name the address agents reach it by: the
      # node's advertised address (IP SAN), as Nomad service discovery gives it to them.
      template {
        destination = "secrets/tls.crt"
        perms       = "0400"
        change_mode = "restart"
        data        = <<-EOT
          {{- with nomadVar "nomad/jobs/gpuhealth-aggregator/tls" }}{{ .cert }}{{ end }}
          EOT
      }

      template {
        destination = "secrets/tls.key"
        perms       = "0400"
        change_mode = "restart"
        data        = <<-EOT
          {{- with nomadVar "nomad/jobs/gpuhealth-aggregator/tls" }}{{ .key }}{{ end }}
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
