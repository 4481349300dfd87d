# The gpuhealth agent on Nomad: one allocation on every GPU node (a system job). Install steps, the client
# configuration it needs and what it does to a node: docs/nomad.md.
#
#   nomad acl policy apply -namespace default -job gpuhealth-agent \
#     -description "gpuhealth agent" gpuhealth-agent deploy/nomad/gpuhealth-agent.policy.hcl
#   nomad var put nomad/jobs/gpuhealth-agent aggregator_ca=@aggregator-ca.pem
#   nomad job run deploy/nomad/gpuhealth-agent.nomad.hcl

variable "image" {
  type        = string
  description = "The gpuhealth image, built from the repository's Dockerfile and pushed to your registry."
  default     = "ghcr.io/gpuhealth/gpuhealth:0.1.0"
}

job "gpuhealth-agent" {
  # A system job: Nomad places one allocation on every feasible node, and new GPU nodes get theirs as they
  # join. It also lets the agent survive the drain of its own node: the agent drains with
  # IgnoreSystemJobs = true, so Nomad leaves system allocations running while it migrates everything else,
  # and the agent stays to watch the GPUs, release the node and report (a human drain should use
  # `nomad node drain -ignore-system` for the same reason).
  type        = "system"
  datacenters = ["*"]

  # Linux only: NVML, /dev/kmsg and the NVIDIA container runtime exist nowhere else.
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  # GPU nodes only. The NVIDIA device plugin fingerprints GPUs as node devices, not node attributes, and
  # ${device.*} can only be matched inside a `device "nvidia/gpu"` block, which would reserve GPUs and take
  # them from training jobs. So the agent selects nodes on what it needs itself: the Docker runtime
  # `nvidia` (the NVIDIA container toolkit that brings NVML and /dev/nvidia* into the container), which the
  # docker driver fingerprints as the comma-separated attribute driver.docker.runtimes.
  constraint {
    attribute = "${attr.driver.docker.runtimes}"
    operator  = "set_contains"
    value     = "nvidia"
  }

  group "agent" {
    # The agent's state (open incident, counters, the outbox of unsent reports) survives a restart or an
    # upgrade of the agent on the node. A host volume declared in the client configuration:
    #   host_volume "gpuhealth-state" { path = "/var/lib/gpuhealth" }
    volume "state" {
      type      = "host"
      source    = "gpuhealth-state"
      read_only = false
    }

    network {
      # /metrics, /healthz and /readyz (agent/telemetry/http.py); a fixed port so that Prometheus finds it on every node.
      port "metrics" {
        static = 9477
        to     = 9477
      }
    }

    # System jobs are never rescheduled elsewhere: keep restarting on this node, more slowly after failures.
    restart {
      attempts = 5
      interval = "5m"
      delay    = "15s"
      mode     = "delay"
    }

    service {
      name     = "gpuhealth-agent"
      provider = "nomad"
      port     = "metrics"
      tags     = ["metrics"]

      # Liveness: /healthz answers 200 while the agent's loop thread is alive. Three failures in a row
      # restart the task, as a Kubernetes liveness probe would.
      check {
        name     = "alive"
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"

        check_restart {
          limit = 3
          grace = "30s"
        }
      }
    }

    task "agent" {
      driver = "docker"

      # User 0, but with every capability dropped except CAP_SYSLOG: the state directory is owned by root,
      # and Docker makes an added capability effective only for root (a non-root task cannot gain any).
      user = "root"

      config {
        image = var.image
        args  = ["agent", "--config", "/local/agent.yaml"]
        ports = ["metrics"]

        # NVML without reserving GPUs: the NVIDIA runtime injects libnvidia-ml and the /dev/nvidia* nodes
        # named by NVIDIA_VISIBLE_DEVICES (all of them, see env), so training jobs keep every GPU. `nvidia` is
        # in the docker plugin's default allow_runtimes.
        runtime = "nvidia"

        # Not privileged. The kernel log needs exactly two things: the /dev/kmsg device, read-only in the
        # container's device cgroup, and CAP_SYSLOG, without which the kernel refuses to read it when the host
        # sets kernel.dmesg_restrict=1. Add "syslog" to the docker plugin's allow_caps on GPU clients.
        privileged = false
        cap_drop   = ["all"]
        cap_add    = ["syslog"]
        devices = [
          {
            host_path          = "/dev/kmsg"
            container_path     = "/dev/kmsg"
            cgroup_permissions = "r"
          }
        ]

        security_opt    = ["no-new-privileges"]
        readonly_rootfs = true

        # Scratch space, since the root filesystem is read-only.
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
        volume      = "state"
        destination = "/var/lib/gpuhealth"
      }

      # The agent's Nomad credential: this task's workload identity, written to /secrets/nomad_token (a
      # file rather than NOMAD_TOKEN, which `docker inspect` would show and every child process inherit).
      # The ACL policy in gpuhealth-agent.policy.hcl is attached to this job, so the identity carries
      # exactly those rights; no long-lived token is created or stored anywhere.
      identity {
        file        = true
        change_mode = "restart"
      }

      # The agent's identity at the aggregator: a second workload identity, for the aggregator's audience
      # only (so it is no Nomad credential), written to /secrets/nomad_gpuhealth-aggregator.jwt and renewed
      # by Nomad before it expires (the agent reads the file for every request). The aggregator checks its
      # signature against the servers' keys and lets it act for the node of its allocation only; no shared
      # token is on any node.
      identity {
        name = "gpuhealth-aggregator"
        aud  = ["gpuhealth-aggregator"]
        file = true
        ttl  = "1h"
      }

      env {
        NVIDIA_VISIBLE_DEVICES     = "all"
        NVIDIA_DRIVER_CAPABILITIES = "utility"
        # The Nomad node name (Name in /v1/node/:id), the name the agent reports to the aggregator.
        NODE_NAME = "${node.unique.name}"
        # The local Nomad client's HTTP API, on the address it advertises. The client forwards node
        # requests to the servers over its own connection, so the agent needs no route to them. (The Task
        # API socket in the secrets directory would avoid the network, but the agent's client speaks TCP.)
        GPUHEALTH_NOMAD__ADDRESS = "http://${attr.unique.network.ip-address}:4646"
        # What the node is, for choosing its behaviour profile (profiles below; docs/turning-on-safely.md).
        GPUHEALTH_NODE_GROUP__NODE_POOL  = "${node.pool}"
        GPUHEALTH_NODE_GROUP__NODE_CLASS = "${node.class}"
      }

      # The agent's settings (keys: docs/agent.md). GPUHEALTH_* variables override any of them.
      template {
        destination = "local/agent.yaml"
        change_mode = "restart"
        splay       = "30s"
        data        = <<-EOT
          orchestrator: nomad
          interval_s: 10
          state_dir: /var/lib/gpuhealth
          http:
            port: 9477
          kernel_log:
            enabled: true
            source: kmsg
          policy:
            mark: true
            taint: true
            cordon: false
            # Drain and requeue need a permit from the aggregator; turn this on once it runs.
            drain: false
          nomad:
            token_file: /secrets/nomad_token
            # The namespace whose batch jobs are requeued; the ACL policy grants this one.
            namespace: default
          # Recovery after the drain (docs/recovery.md): GPU reset, validation, release. Off; to turn it on,
          # uncomment and set policy.drain above. A GPU reset (nvidia-smi --gpu-reset) needs root's powers:
          # set privileged = true in the task's config (and allow_privileged on the clients' docker plugin).
          # kured does not run on Nomad, so reboots stay with a human (mode off) unless reboot.mode command
          # names a tool that reboots the host from this container.
          # recovery:
          #   enabled: true
          #   max_attempts: 2
          #   reboot:
          #     mode: "off"
          # Behaviour profiles per node group (docs/turning-on-safely.md): a node picks the profile whose
          # match its node pool, class (from the env above) and metadata satisfy; give the aggregator's job
          # the same section for each profile's budget_share_percent. None: every node runs the settings above.
          # profiles:
          #   definitions:
          #     canary:
          #       mode: drain
          #       match: {node_pool: canary}
          #       shadow: true
          #       shadow_writes: quarantine
          #       budget_share_percent: 20
          #     main:
          #       mode: quarantine
          #       match: {node_pool: default}
          aggregator:
            token_file: /secrets/nomad_gpuhealth-aggregator.jwt
            ca_file: /secrets/aggregator-ca.pem
            {{- with nomadService "gpuhealth-aggregator" }}{{ with index . 0 }}
            url: https://{{ .Address }}:{{ .Port }}
            {{- end }}{{ end }}
          EOT
      }

      # The CA that signed the aggregator's certificate, from the Nomad variable nomad/jobs/gpuhealth-agent
      # (readable by this job's workload identity without any policy): the agent verifies the aggregator
      # with it before it sends its identity.
      template {
        destination = "secrets/aggregator-ca.pem"
        perms       = "0400"
        change_mode = "restart"
        data        = <<-EOT
          {{- with nomadVar "nomad/jobs/gpuhealth-agent" }}{{ .aggregator_ca }}{{ end }}
          EOT
      }

      # About 65 MiB resident was measured on an 8-GPU node; memory_max applies where the cluster enables
      # memory oversubscription.
      resources {
        cpu        = 100
        memory     = 128
        memory_max = 256
      }

      kill_timeout = "30s"
    }
  }
}
