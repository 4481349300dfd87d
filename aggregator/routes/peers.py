"""The peer comparison: every GPU that stands out from its peers (same model and driver) across the fleet."""

from __future__ import annotations

from fastapi import APIRouter

from aggregator.auth.principal import Role
from aggregator.routes.context import AppContext
from core.aggregator_api import PeerGroupView, PeerOutlierView, PeerReport


def router(ctx: AppContext) -> APIRouter:
    """Viewers read the outliers (the fleet page's "slow GPUs" list and ``gpuhealth peers``)."""
    routes = APIRouter(tags=["fleet"])
    reader = [ctx.access.role(Role.VIEWER, "read the fleet")]

    @routes.get("/v1/peers", response_model=PeerReport, dependencies=reader)
    def get_peers() -> PeerReport:
        """GPUs far from their peers on a reading, with the evidence; and the model/driver groups compared
        (a group with fewer than ``peers.min_peers`` other GPUs is not judged). Warnings only: nothing is
        drained for a peer outlier."""
        if ctx.peers is None:
            return PeerReport(generated_at=ctx.now(), min_peers=0, outliers=[], groups=[])
        result = ctx.peers.comparison()
        return PeerReport(
            generated_at=ctx.now(),
            min_peers=ctx.peers.settings.min_peers,
            outliers=[
                PeerOutlierView(
                    node=item.node,
                    gpu_index=item.index,
                    gpu_uuid=item.uuid,
                    model=item.model,
                    driver=item.driver,
                    code=item.code,
                    evidence=item.evidence,
                    value=item.value,
                    peer_value=item.peer_value,
                    peers=item.peers,
                )
                for item in result.outliers
            ],
            groups=[
                PeerGroupView(model=g.model, driver=g.driver, gpus=g.gpus, busy=g.busy, judged=g.judged)
                for g in result.groups
            ],
        )

    return routes
