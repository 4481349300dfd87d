"""The baseline of ``bench.aggregator``: the same stack doing only the unavoidable part of a report.

A FastAPI app under uvicorn (the aggregator's own versions and options: httptools, no access log, frozen
start-up objects) with one route, ``POST /v1/reports``, that checks the bearer token, parses and validates the
body with the same ``Report`` model and answers an acknowledgement encoded by ``ReportAck``: no database,
no authenticator chain, no metrics. Measured under the same load in the same run, it tells the product's own
cost per report from the speed of the machine (and from whatever else the machine is doing): the benchmark
reports each ingest rate also as a ratio to this one.

``python -m bench.baseline_server PORT TOKEN`` serves on 127.0.0.1 until terminated.
"""

from __future__ import annotations

import gc
import hmac
import sys

import uvicorn
from fastapi import FastAPI, Request, Response
from starlette.responses import JSONResponse

from core.aggregator_api import Report, ReportAck


def baseline_app(token: str) -> FastAPI:
    """The one-route app: token check, validation, acknowledgement."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    expected = f"Bearer {token}".encode()

    @app.get("/readyz")
    async def ready() -> dict[str, str]:
        return {"status": "ready"}

    @app.post("/v1/reports")
    async def post_report(request: Request) -> Response:
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return JSONResponse({"detail": "unauthenticated"}, status_code=401)
        report = Report.model_validate_json(await request.body())
        ack = ReportAck(node=report.node, seq=report.seq, accepted=True, last_seq=report.seq)
        return Response(ack.model_dump_json(), media_type="application/json")

    return app


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        sys.stderr.write("usage: python -m bench.baseline_server PORT TOKEN\n")
        return 2
    app = baseline_app(argv[1])
    gc.freeze()
    uvicorn.run(app, host="127.0.0.1", port=int(argv[0]), log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
