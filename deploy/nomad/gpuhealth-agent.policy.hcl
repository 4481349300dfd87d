# The gpuhealth agent's Nomad ACL policy: the least the agent needs, and nothing broader. Attach it to the
# agent job's workload identity, so that no long-lived token exists:
#
#   nomad acl policy apply -namespace default -job gpuhealth-agent \
#     -description "gpuhealth agent" gpuhealth-agent deploy/nomad/gpuhealth-agent.policy.hcl
#
# (Where a token is preferred, `nomad acl token create -name gpuhealth-agent -policy gpuhealth-agent` works
# with the same policy; the agent then reads it from NOMAD_TOKEN or nomad.token_file.)

# node:write — the writes the agent makes to its own node:
#   POST /v1/client/metadata          gpuhealth.state, gpuhealth.incident, gpuhealth.unhealthy_gpus
#   POST /v1/node/:node_id/eligibility ineligible on quarantine, eligible again on release
#   POST /v1/node/:node_id/drain       drain with IgnoreSystemJobs (and DrainSpec null to cancel its own)
# It includes node:read for GET /v1/node/:node_id (the blocking query that watches the node). Nomad has no
# narrower grant: node rules take a policy only and cover every node, which is why the agent itself only
# ever addresses the node id its local client reports.
node {
  policy = "write"
}

# agent:read — GET /v1/agent/self on the local client: its node id and name when the agent starts.
agent {
  policy = "read"
}

# The namespace of the GPU training jobs (the agent's nomad.namespace; to requeue jobs of several
# namespaces, unset nomad.namespace and repeat this block for each of them):
#   read-job         GET /v1/node/:node_id/allocations (with node:read), GET /v1/job/:job_id,
#                    GET /v1/job/:job_id/allocations — which batch jobs run on the node, and all their
#                    allocations
#   alloc-lifecycle  POST /v1/allocation/:alloc_id/stop — requeue: every allocation of an affected batch
#                    job is stopped, and the scheduler places the job again on healthy nodes
# Not the `read` or `write` policy: nothing here submits, scales or execs into jobs, or reads logs.
namespace "default" {
  capabilities = ["read-job", "alloc-lifecycle"]
}
