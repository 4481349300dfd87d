"""The endpoints the emulator serves, each with the ACL the Nomad API documentation lists for it.

| endpoint | ACL (api-docs page) |
|---|---|
| ``GET /v1/nodes``, ``GET /v1/node/:id`` | ``node:read`` (nodes) |
| ``GET /v1/node/:id/allocations`` | ``node:read`` + ``namespace:read-job`` (nodes) |
| ``POST /v1/node/:id/eligibility``, ``/drain`` | ``node:write`` (nodes) |
| ``GET /v1/allocations``, ``GET /v1/allocation/:id`` | ``namespace:read-job`` (allocations) |
| ``POST /v1/allocation/:id/stop`` | ``namespace:alloc-lifecycle`` (allocations) |
| ``GET /v1/jobs`` | ``namespace:list-jobs`` (jobs) |
| ``POST /v1/jobs``, ``POST``/``DELETE /v1/job/:id`` | ``namespace:submit-job`` (jobs) |
| ``GET /v1/job/:id``, ``/allocations`` | ``namespace:read-job`` (jobs) |
| ``GET`` / ``POST /v1/client/metadata`` | ``node:read`` / ``node:write`` (client) |
| ``GET /v1/agent/self`` | ``agent:read`` (agent) |
| ``/v1/acl/*`` | management token (acl/tokens, acl/policies) |
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.nomad import errors
from sim.nomad.acl import Acl, PolicyError, Token
from sim.nomad.http import Call, Route
from sim.nomad.jobs import JobSpecError, normalise_job
from sim.nomad.model import (
    DATACENTER,
    NAMESPACE,
    NOMAD_VERSION,
    REGION,
    JsonDict,
    alloc_stub,
    job_stub,
    node_stub,
)
from sim.nomad.state import NomadState, is_live
from sim.nomad.workload_identity import WorkloadIdentities

_TRUE = ("true", "1")


def _flag(call: Call, name: str) -> bool:
    return call.query.get(name, "").lower() in _TRUE


def _namespace(call: Call) -> str:
    return call.query.get("namespace") or NAMESPACE


def _refuse_filter(call: Call) -> None:
    # Ignoring a filter expression would hand back more than the caller asked for: refuse it instead.
    if call.query.get("filter"):
        raise errors.bad_request("the emulated Nomad API does not evaluate filter expressions")


class Endpoints:
    """Handlers bound to one store and ACL table."""

    def __init__(
        self,
        state: NomadState,
        acl: Acl,
        server_address: Callable[[], str],
        identities: WorkloadIdentities | None = None,
    ) -> None:
        self.state = state
        self.acl = acl
        self._server_address = server_address
        self.identities = identities or WorkloadIdentities()

    def routes(self) -> list[Route]:
        """Every served route."""
        blocking, plain = True, False  # reads that honour ?index= vs plain answers
        return [
            Route("GET", "/v1/nodes", self.list_nodes, blocking),
            Route("GET", "/v1/node/:id", self.read_node, blocking),
            Route("GET", "/v1/node/:id/allocations", self.node_allocations, blocking),
            Route("POST", "/v1/node/:id/eligibility", self.eligibility, plain),
            Route("POST", "/v1/node/:id/drain", self.drain, plain),
            Route("GET", "/v1/allocations", self.list_allocations, blocking),
            Route("GET", "/v1/allocation/:id", self.read_allocation, blocking),
            Route("POST", "/v1/allocation/:id/stop", self.stop_allocation, plain),
            Route("GET", "/v1/jobs", self.list_jobs, blocking),
            Route("POST", "/v1/jobs", self.register_job, plain),
            Route("GET", "/v1/job/:id", self.read_job, blocking),
            Route("POST", "/v1/job/:id", self.register_job, plain),
            Route("DELETE", "/v1/job/:id", self.deregister_job, plain),
            Route("GET", "/v1/job/:id/allocations", self.job_allocations, blocking),
            Route("GET", "/v1/client/metadata", self.read_metadata, plain),
            Route("POST", "/v1/client/metadata", self.apply_metadata, plain),
            Route("GET", "/v1/agent/self", self.agent_self, plain),
            Route("GET", "/v1/status/leader", lambda call: "127.0.0.1:4647", plain),
            Route("GET", "/v1/regions", lambda call: [REGION], plain),
            # Public, as on a real server: the keys that verify workload identities.
            Route("GET", "/.well-known/jwks.json", lambda call: self.identities.jwks(), plain),
            Route("POST", "/v1/acl/bootstrap", self.acl_bootstrap, plain),
            Route("GET", "/v1/acl/policies", self.acl_policies, plain),
            Route("GET", "/v1/acl/policy/:name", self.acl_read_policy, plain),
            Route("POST", "/v1/acl/policy/:name", self.acl_write_policy, plain),
            Route("DELETE", "/v1/acl/policy/:name", self.acl_delete_policy, plain),
            Route("GET", "/v1/acl/tokens", self.acl_tokens, plain),
            Route("POST", "/v1/acl/token", self.acl_create_token, plain),
            Route("GET", "/v1/acl/token/self", self.acl_self_token, plain),
            Route("GET", "/v1/acl/token/:accessor", self.acl_read_token, plain),
            Route("DELETE", "/v1/acl/token/:accessor", self.acl_delete_token, plain),
        ]

    # --- nodes ----------------------------------------------------------------------------------------

    def list_nodes(self, call: Call) -> tuple[Any, int]:
        self.acl.require(call.token, node="read")
        _refuse_filter(call)
        prefix = call.query.get("prefix", "")
        resources = _flag(call, "resources")
        with self.state.lock:
            nodes = [
                node_stub(n, resources=resources)
                for n in self.state.node_refs()
                if n["ID"].startswith(prefix)
            ]
            return nodes, self.state.index("nodes")

    def read_node(self, call: Call) -> tuple[Any, int]:
        self.acl.require(call.token, node="read")
        node = self.state.node_by_id(call.path_params["id"])
        return node, int(node["ModifyIndex"])

    def node_allocations(self, call: Call) -> tuple[Any, int]:
        self.acl.require(call.token, node="read", namespace=NAMESPACE, capability="read-job")
        node_id = call.path_params["id"]
        self.state.node_by_id(node_id)
        with self.state.lock:
            return self.state.allocations(node_id=node_id), self.state.index("allocs")

    def eligibility(self, call: Call) -> Any:
        self.acl.require(call.token, node="write")
        body = call.body if isinstance(call.body, dict) else {}
        wanted = body.get("Eligibility")
        if wanted not in ("eligible", "ineligible"):
            raise errors.bad_request(f"invalid scheduling eligibility {wanted!r}")
        return self.state.set_eligibility(call.path_params["id"], wanted == "eligible")

    def drain(self, call: Call) -> Any:
        self.acl.require(call.token, node="write")
        body = call.body if isinstance(call.body, dict) else {}
        spec = body.get("DrainSpec")
        if spec is not None and not isinstance(spec, dict):
            raise errors.bad_request("DrainSpec must be an object or null")
        meta = body.get("Meta")
        if meta is not None and not (
            isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())
        ):
            raise errors.bad_request("Meta must map strings to strings")
        token = self._caller(call)
        return self.state.set_drain(
            call.path_params["id"],
            spec,
            mark_eligible=bool(body.get("MarkEligible")),
            meta=meta,
            accessor=token.accessor_id if token else "",
        )

    def _caller(self, call: Call) -> Token | None:
        return self.acl.resolve(call.token) if self.acl.enabled else None

    # --- allocations ----------------------------------------------------------------------------------

    def list_allocations(self, call: Call) -> tuple[Any, int]:
        namespace = _namespace(call)
        self.acl.require(call.token, namespace=namespace, capability="read-job")
        _refuse_filter(call)
        prefix = call.query.get("prefix", "")
        resources = _flag(call, "resources")
        with self.state.lock:
            allocs = [
                alloc_stub(a, resources=resources)
                for a in self.state.alloc_refs()
                if a["ID"].startswith(prefix) and namespace in ("*", a["Namespace"])
            ]
            return allocs, self.state.index("allocs")

    def read_allocation(self, call: Call) -> tuple[Any, int]:
        alloc = self.state.allocation(call.path_params["id"])
        self.acl.require(call.token, namespace=alloc["Namespace"], capability="read-job")
        return alloc, int(alloc["ModifyIndex"])

    def stop_allocation(self, call: Call) -> Any:
        alloc = self.state.allocation(call.path_params["id"])
        self.acl.require(call.token, namespace=alloc["Namespace"], capability="alloc-lifecycle")
        return self.state.stop_allocation(alloc["ID"])

    # --- jobs -----------------------------------------------------------------------------------------

    def list_jobs(self, call: Call) -> tuple[Any, int]:
        namespace = _namespace(call)
        self.acl.require(call.token, namespace=namespace, capability="list-jobs")
        _refuse_filter(call)
        prefix = call.query.get("prefix", "")
        with self.state.lock:
            jobs = [
                job_stub(j)
                for j in self.state.job_refs()
                if j["ID"].startswith(prefix) and namespace in ("*", j["Namespace"])
            ]
            return jobs, self.state.index("jobs")

    def register_job(self, call: Call) -> Any:
        body = call.body if isinstance(call.body, dict) else {}
        raw_job = body.get("Job")
        job_body = raw_job if isinstance(raw_job, dict) else {}
        self.acl.require(
            call.token, namespace=str(job_body.get("Namespace") or NAMESPACE), capability="submit-job"
        )
        try:
            job = normalise_job(body, now=self.state.clock.now())
        except JobSpecError as error:
            raise errors.bad_request(str(error)) from None
        if "id" in call.path_params and call.path_params["id"] != job["ID"]:
            raise errors.bad_request("Job ID does not match name")
        return self.state.register_job(job)

    def read_job(self, call: Call) -> tuple[Any, int]:
        job = self.state.job(call.path_params["id"])
        self.acl.require(call.token, namespace=job["Namespace"], capability="read-job")
        return job, int(job["ModifyIndex"])

    def deregister_job(self, call: Call) -> Any:
        job = self.state.job(call.path_params["id"])
        self.acl.require(call.token, namespace=job["Namespace"], capability="submit-job")
        return self.state.deregister_job(job["ID"], purge=_flag(call, "purge"))

    def job_allocations(self, call: Call) -> tuple[Any, int]:
        job = self.state.job(call.path_params["id"])
        self.acl.require(call.token, namespace=job["Namespace"], capability="read-job")
        with self.state.lock:
            allocs = [alloc_stub(a) for a in self.state.alloc_refs() if a["JobID"] == job["ID"]]
            return allocs, self.state.index("allocs")

    # --- client and agent -----------------------------------------------------------------------------

    def _metadata_node(self, call: Call) -> str:
        body = call.body if isinstance(call.body, dict) else {}
        node_id = call.query.get("node_id") or body.get("NodeID") or call.local_node
        if not node_id:
            raise errors.bad_request("missing node_id: required when the request reaches a server")
        self.state.node_by_id(str(node_id))
        return str(node_id)

    def read_metadata(self, call: Call) -> Any:
        self.acl.require(call.token, node="read")
        return self.state.metadata(self._metadata_node(call))

    def apply_metadata(self, call: Call) -> Any:
        self.acl.require(call.token, node="write")
        node_id = self._metadata_node(call)
        meta = call.body.get("Meta") if isinstance(call.body, dict) else None
        if not isinstance(meta, dict) or not all(v is None or isinstance(v, str) for v in meta.values()):
            raise errors.bad_request("Meta must map strings to strings or null")
        return self.state.apply_metadata(node_id, meta)

    def agent_self(self, call: Call) -> Any:
        self.acl.require(call.token, agent="read")
        if call.local_node is None:
            return self._server_agent()
        node = self.state.node_by_id(call.local_node)
        running = sum(1 for a in self.state.allocations(node_id=node["ID"]) if is_live(a))
        return {
            "config": {
                "NodeName": node["Name"],
                "Region": REGION,
                "Datacenter": node["Datacenter"],
                "Version": {"Version": NOMAD_VERSION},
                "Client": {"Enabled": True, "NodeClass": node["NodeClass"], "Meta": node["Meta"]},
                "Server": {"Enabled": False},
                "ACL": {"Enabled": self.acl.enabled},
            },
            "member": {
                "Name": node["Name"],
                "Addr": node["Address"],
                "Port": 4648,
                "Status": "alive",
                "Tags": {},
            },
            "stats": {
                "client": {
                    "node_id": node["ID"],
                    "known_servers": self._server_address(),
                    "num_allocations": str(running),
                    "last_heartbeat": "0",
                    "heartbeat_ttl": "15s",
                }
            },
        }

    def _server_agent(self) -> JsonDict:
        return {
            "config": {
                "NodeName": "nomad-sim-server",
                "Region": REGION,
                "Datacenter": DATACENTER,
                "Version": {"Version": NOMAD_VERSION},
                "Client": {"Enabled": False},
                "Server": {"Enabled": True},
                "ACL": {"Enabled": self.acl.enabled},
            },
            "member": {
                "Name": "nomad-sim-server.global",
                "Addr": "127.0.0.1",
                "Port": 4648,
                "Status": "alive",
                "Tags": {"role": "nomad", "region": REGION, "dc": DATACENTER},
            },
            "stats": {"nomad": {"leader": "true", "known_regions": "1"}, "raft": {"state": "Leader"}},
        }

    # --- ACL ------------------------------------------------------------------------------------------

    def acl_bootstrap(self, call: Call) -> Any:
        if not self.acl.enabled:
            raise errors.bad_request("ACL support disabled")
        raise errors.bad_request("ACL bootstrap already done")

    def acl_policies(self, call: Call) -> Any:
        self.acl.require_management(call.token)
        return [
            {"Name": p.name, "Description": "", "CreateIndex": 1, "ModifyIndex": 1}
            for p in self.acl.policies()
        ]

    def acl_read_policy(self, call: Call) -> Any:
        self.acl.require_management(call.token)
        policy = self.acl.policy(call.path_params["name"])
        return {"Name": policy.name, "Rules": policy.rules, "Description": ""}

    def acl_write_policy(self, call: Call) -> Any:
        self.acl.require_management(call.token)
        body = call.body if isinstance(call.body, dict) else {}
        rules = body.get("Rules")
        if not isinstance(rules, str):
            raise errors.bad_request("policy Rules must be a string")
        try:
            self.acl.set_policy(call.path_params["name"], rules)
        except PolicyError as error:
            raise errors.bad_request(str(error)) from None
        return None

    def acl_delete_policy(self, call: Call) -> Any:
        self.acl.require_management(call.token)
        self.acl.delete_policy(call.path_params["name"])
        return None

    def acl_tokens(self, call: Call) -> Any:
        self.acl.require_management(call.token)
        return [{k: v for k, v in t.to_api().items() if k != "SecretID"} for t in self.acl.tokens()]

    def acl_create_token(self, call: Call) -> Any:
        self.acl.require_management(call.token)
        body = call.body if isinstance(call.body, dict) else {}
        policies = body.get("Policies") or []
        if not isinstance(policies, list):
            raise errors.bad_request("Policies must be a list")
        token = self.acl.add_token(
            str(body.get("Name") or ""),
            str(body.get("Type") or "client"),
            [str(p) for p in policies],
            self.state.clock.now(),
            self.state.index(),
        )
        return token.to_api()

    def acl_self_token(self, call: Call) -> Any:
        if not self.acl.enabled:
            raise errors.bad_request("ACL support disabled")
        token = self.acl.resolve(call.token)
        if token is None:
            raise errors.permission_denied()
        return token.to_api()

    def acl_read_token(self, call: Call) -> Any:
        self.acl.require_management(call.token)
        return self.acl.token_by_accessor(call.path_params["accessor"]).to_api()

    def acl_delete_token(self, call: Call) -> Any:
        self.acl.require_management(call.token)
        self.acl.delete_token(call.path_params["accessor"])
        return None
