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
#   POST /v1/node/:node_id/drain       DrainSpec null: cancels the drain of its own node on release (and,
#                                      with drain_by: agent only, the drain itself)
# It includes node:read for GET /v1/node/:node_id (the blocking query that watches the node). Nomad has no
# narrower grant: node rules take a policy only and cover every node, which is why the agent itself only
# ever addresses the node id its local client reports, and why the drain and the restart of batch jobs are
# the central remediator's (gpuhealth-remediator.policy.hcl, on the aggregator's token; docs/nomad.md).
node {
  policy = "write"
}

# agent:read — GET /v1/agent/self on the local client: its node id and name when the agent starts.
agent {
  policy = "read"
}

# The namespace of the GPU training jobs:
#   read-job         GET /v1/node/:node_id/allocations (with node:read) — whether GPU work runs on the
#                    node (the idle check of deep diagnostics)
# Not alloc-lifecycle: the agent stops no allocation; the central remediator restarts batch jobs after a
# drain. (Only an agent with drain_by: agent needs alloc-lifecycle here, and then read-job on every
# namespace whose jobs it requeues.) Not the `read` or `write` policy: nothing here submits, scales or
# execs into jobs, or reads logs.
namespace "default" {
  capabilities = ["read-job"]
}
