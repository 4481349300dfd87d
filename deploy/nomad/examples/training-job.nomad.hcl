job "train-llm" {
  type        = "batch"
  datacenters = ["*"]

  group "trainer" {
    # Only nodes whose GPUs gpuhealth reports healthy. A node without the key (no agent yet, or an agent
    # that has not finished its first pass) does not match either, so a new node takes training work only
    # once it has been checked.
    constraint {
      attribute = "${meta.gpuhealth.state}"
      value     = "healthy"
    }

    # A GPU fault usually kills the task: rescheduling places it again, and the constraint above keeps it
    # off the node gpuhealth has marked. When gpuhealth requeues the job instead (it stops every allocation
    # of the job, so that all ranks restart together), Nomad places the stopped allocations again itself.
    reschedule {
      unlimited      = true
      delay          = "30s"
      delay_function = "exponential"
      max_delay      = "10m"
    }

    task "train" {
      driver = "docker"

      config {
        image   = "nvcr.io/nvidia/pytorch:24.08-py3"
        command = "torchrun"
        args    = ["--nproc-per-node=8", "/local/train.py"]
      }

      resources {
        cpu    = 32000
        memory = 262144

        device "nvidia/gpu" {
          count = 8
        }
      }
    }
  }
}
