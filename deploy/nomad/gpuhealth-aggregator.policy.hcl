# ACL policy of the gpuhealth aggregator job's workload identity: read the allocations of the agent job, so
# that an agent's workload identity (a JWT naming its allocation) is mapped to the node it runs on. Nothing
# else: no node, job or variable writes. Attach it to the job (docs/nomad.md):
#
#   nomad acl policy apply -namespace default -job gpuhealth-aggregator gpuhealth-aggregator \
#       deploy/nomad/gpuhealth-aggregator.policy.hcl

namespace "default" {
  capabilities = ["read-job"]
}
