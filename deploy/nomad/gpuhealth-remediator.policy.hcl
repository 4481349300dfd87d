# The central remediator's Nomad ACL policy: what the aggregator needs to drain a node and restart its batch
# jobs on the permits it grants (docs/nomad.md, "Least privilege"). Attach it to the aggregator job's
# workload identity, or to a token the aggregator reads (remediator.nomad.token_file):
#
#   nomad acl policy apply -namespace default -job gpuhealth-aggregator \
#     -description "gpuhealth remediator" gpuhealth-remediator deploy/nomad/gpuhealth-remediator.policy.hcl
#
# It acts only on a drain an agent ordered under a permit that is active for that node and incident.

# node:write — through the servers, on the node being drained:
#   GET /v1/nodes                      the node's id from its name (the permit names the node)
#   POST /v1/client/metadata?node_id=  gpuhealth.drained, gpuhealth.ineligible_by, gpuhealth.requeued
#   POST /v1/node/:node_id/drain       drain with IgnoreSystemJobs (the agent's system job stays)
node {
  policy = "write"
}

# The namespace of the GPU training jobs (remediator.nomad.namespace; repeat for each namespace whose jobs
# are requeued when it is unset):
#   read-job         GET /v1/node/:node_id/allocations, GET /v1/job/:job_id, GET /v1/job/:job_id/allocations
#   alloc-lifecycle  POST /v1/allocation/:alloc_id/stop — every allocation of an affected batch job is
#                    stopped, and the scheduler places the job again on healthy nodes
namespace "default" {
  capabilities = ["read-job", "alloc-lifecycle"]
}
