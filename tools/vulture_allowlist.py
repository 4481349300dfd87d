# ruff: noqa: B018, F821  -- a vulture allow list: each line "uses" a name; it is parsed, never run
"""Names vulture reports as unused that are used where it cannot see: by a framework, by name, on the wire.

CI runs ``vulture`` (configured in pyproject.toml, ``[tool.vulture]``) over the packages and this file; a
name listed here counts as used everywhere. Add a name only with the reason it is used; delete code that
is really unused instead. pyproject.toml also ignores, for every file: functions under FastAPI route and
exception-handler decorators, pydantic validators and SQLAlchemy event listeners (the framework calls
them), every ``model_config`` (pydantic reads it) and the ``nvmlDevice*`` methods of the NVML protocol and
its fake (``GpuReader.value`` calls them by name).
"""

# --- Arguments a calling convention fixes, unused by our implementation -----------------------------------
exc_type  # __exit__(exc_type, exc, traceback): the context-manager protocol
tb  # __exit__
traceback  # __exit__
signum  # signal handlers are called as handler(signum, frame)
frame  # signal handlers
settings_cls  # pydantic-settings calls settings_customise_sources(...) with these keywords
dotenv_settings  # settings_customise_sources
file_secret_settings  # settings_customise_sources

# --- Hooks a library calls or attributes it reads --------------------------------------------------------
_.settings_customise_sources  # pydantic-settings: the order of the settings sources (agent/settings.py)
_.collect  # prometheus_client calls a custom Collector's collect() on every scrape (aggregator/metrics.py)
_.auth_flow  # httpx.Auth: httpx calls it for every request (agent/uplink/client.py)
_.binary_location  # Selenium ChromeOptions: which Chromium binary to start (bench/fleet_page.py)
_.do_GET  # http.server dispatches GET to do_GET (agent/telemetry/http.py)
_.do_POST  # http.server dispatches POST to do_POST (sim/scenario/receiver.py)
_.log_message  # http.server's access log, silenced (agent/telemetry/http.py, sim/scenario/receiver.py)
_.daemon_threads  # socketserver: request threads do not keep the process alive
_.request_queue_size  # socketserver: the listen backlog it passes to listen() (agent/telemetry/http.py)
_.handle_error  # socketserver calls it when a request handler raises (agent/telemetry/http.py logs it)
_.impl  # SQLAlchemy TypeDecorator: the underlying column type (aggregator/store/tables.py)
_.cache_ok  # SQLAlchemy TypeDecorator: safe to cache statements using the type
_.process_bind_param  # SQLAlchemy TypeDecorator: Python value -> column value
_.process_result_value  # SQLAlchemy TypeDecorator: column value -> Python value
_.isolation_level  # sqlite3 connection: None lets SQLAlchemy's "begin" event issue BEGIN (store/engine.py)
revision  # Alembic reads these four module attributes of every migration (aggregator/migrations/versions/)
down_revision  # Alembic
branch_labels  # Alembic
depends_on  # Alembic
downgrade  # Alembic calls downgrade() on "alembic downgrade"
_.should_exit  # uvicorn.Server polls it to stop gracefully (sim/http_server.py, sim/aggregator_process.py)
_.force_exit  # uvicorn.Server: stop without waiting for open connections
_.ConnectionCls  # urllib3 connection pools build their connections from it (remediation/nomad/api.py)
_.pool_classes_by_scheme  # urllib3 PoolManager picks a pool class per scheme from it
_.ENDPOINT  # python-nomad's Requester builds its URLs from ENDPOINT (remediation/nomad/api.py)
_.connection_pool_maxsize  # kubernetes Configuration: urllib3 pool size (sim/scenario/kube_orchestrator.py)
_.crd_dir  # the control plane's CRDs for the chart's dry run (tests/realkube/test_chart_dry_run.py)
_.node_client  # a kubelet's identity on the real control plane (tests/support/fake_kubelet.py)
_.warn  # structlog calls the logger method named after the level (core/logging.py StderrLogger)
_.err  # structlog level alias
_.critical  # structlog level
_.fatal  # structlog level alias

# --- Fields read by name or only on the wire (JSON, YAML, a generated schema) -----------------------------
_.database_url_file  # AggregatorSettings: read by name through SECRET_FILES before validation
_.shared_token_file  # AggregatorSettings: read by name through SECRET_FILES
_.metrics_token_file  # AggregatorSettings: read by name through SECRET_FILES
_.schema_  # the "schema" field of reports, snapshots and scenarios (alias "schema"): validated, serialised
_.sent_at  # gpuhealth.report/v1 field the agent sends (docs/aggregator.md, "Report format")
_.reported_state  # aggregator API answer field (core/aggregator_api.py), serialised as JSON
_.max_nodes  # aggregator API answer field: the permit budget
_.max_percent  # aggregator API answer field: the permit budget
_.generated_at  # aggregator API answer field
_.RELEASE  # RequestKind member, reached through its value "release" on the wire
_.volatile_corrected  # snapshot v1 field (docs/snapshot.md), part of the published schema
_.aggregate_corrected  # snapshot v1 field
_.power_w  # snapshot v1 field
_.clique_id  # snapshot v1 extension: the GPU's NVLink clique (docs/snapshot.md), read by people and tools
_.cluster_uuid  # snapshot v1 extension: the GPU's NVLink domain (docs/snapshot.md)
_.sequence  # KmsgRecord field: the /dev/kmsg sequence number, kept with the parsed record
_.sxid  # SxidEvent field (docs/kernel-log.md)
_.switch  # SxidEvent field
_.EVICT_ONLY  # KindMode member, reached through its value "evict-only" in the configuration (docs/requeue.md)
_.volcano_job  # RequeuePolicy field, read by getattr(policy, kind.value) (requeue/decisions.py)
_.kueue  # RequeuePolicy field, read by getattr
_.pods_without_workload  # RequeueReport field, documented for its callers (docs/requeue.md)
_.max_s  # RunSummary fields, printed by gpuhealth demo --json (sim/scenario/summary.py)
_.total_s  # RunSummary
_.fault_to_taint  # RunSummary
_.alerts_received  # RunSummary
# The fake NVML's return values mirror pynvml's ctypes structures member for member (agent/backends/
# fake_structs.py), so code written against the fake reads the real ones the same way.
_.busIdLegacy
_.bus
_.pciDeviceId
_.pciSubSystemId
_.dVal
_.uiVal
_.ulVal
_.ullVal
_.sllVal
_.siVal
_.usVal
_.fieldId
_.scopeId
_.latencyUsec
_.usedGpuMemory
_.gpuInstanceId
_.computeInstanceId

# --- Test doubles and harnesses: used by tests/, documented for them -------------------------------------
_.ManualClock  # core.clock: the clock tests move by hand (sim/README.md)
_.advance  # ManualClock.advance
_.gpu_uuids  # FakeNvml: the UUIDs it hands out (tests)
_.initialised  # FakeNvml: whether nvmlInit was called (tests)
_.set_power  # FakeNvml fault injection (docs/snapshot.md, "Fault injection")
_.reset_counters  # FakeInfiniband: counters back to 0 as after a reboot (tests of rate reset handling)
_.enable_mig  # FakeNvml fault injection
_.fail_gpu  # FakeNvml fault injection
_.fail_call  # FakeNvml fault injection
_.start_process  # FakeNvml: a compute process on a GPU (the reset's process check, tests)
_.end_process  # FakeNvml
_.set_driver_missing  # FakeNvml fault injection
_.running_kube_sim  # emulated Kubernetes API for tests (sim/README.md)
_.inject  # the emulators' fault injection (sim/README.md)
_.injected  # how many requests a fault rule answered (tests)
_.enable  # sim.kube controller manager: switch a controller on (sim/README.md)
_.disable  # sim.kube controller manager: switch a controller off
_.running_nomad_sim  # emulated Nomad API for tests (sim/README.md)
_.create_token  # NomadSim: an ACL token for a policy (sim/README.md)
_.issue  # the emulators mint identities: pod-bound tokens (sim/kube), task identities (sim/nomad)
_.revoke  # sim/kube: a revoked ServiceAccount token (TokenReview answers unauthenticated)
_.reviews  # sim/kube: how many TokenReviews were asked (the aggregator caches them; tests)
_.open_queries  # NomadApp: blocking queries waiting now (tests)
_.reboot_requests  # SimulatedNode: reboots requested (tests)
_.train_down_link  # FakeNvml slow-GPU faults (docs/fleet-view.md): a trained-down PCIe link
_.throttle_silently  # FakeNvml: clocks held down with no reason bit
_.slow_at_full_power  # FakeNvml: low clocks at full power

# --- Product API that only tests call today: kept as part of the module's documented surface ------------
_.SequenceNumbers  # agent.uplink.client: documented client API (docs/aggregator.md)
_.acknowledge_request  # AggregatorClient: POST .../requests/{id}/ack (the agent acknowledges in its reports)
_.was_drained  # PlanMemory (tests)
_.needs_resync  # KubernetesExecutor (tests); the agent loop re-plans on every pass instead
_.wait_for_drain  # the executors' drain worker: tests wait for a drain to end
_.UNKNOWN_XID  # checks.xid_catalogue: NVML's "unknown XID" number, deliberately not in the catalogue
_.health_ratio  # ReliabilityGroup: a response field (GET /v1/reliability, the fleet page)
_.window_hours  # ReliabilityReport: a response field
_.incidents_per_day  # ReliabilityReport: a response field (the fleet page's time series)
_.remapped_rows_correctable  # GpuReadings: wire fields the evidence archive reads by name (memory.json)
_.remapped_rows_uncorrectable
_.retired_pages_single_bit
_.retired_pages_double_bit
_.retired_pages_pending
_.ecc_aggregate_uncorrected
_.mtime  # tarfile.TarInfo: the member's time
_.peer_findings  # NodeDetail: a response field (FastAPI serialises it)
_.scenario_schema  # entry point of the group gpuhealth.schemas (sim/pyproject.toml)

# --- The replay's counts: read by name (getattr over COUNTED) and serialised by as_dict ---------------------
_.cordons  # gpuhealth.replay.engine.Counts
_.requeues  # gpuhealth.replay.engine.Counts
_.reboots  # gpuhealth.replay.engine.Counts
_.budget_refusals  # gpuhealth.replay.engine.Counts
_.exported_at  # gpuhealth.replay.history.History: part of the file format
