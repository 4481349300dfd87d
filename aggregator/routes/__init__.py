"""The aggregator's HTTP API, one ``APIRouter`` per resource; :func:`aggregator.app.create_app` includes them.

Each module's ``router(ctx)`` builds its router from the app's :class:`~aggregator.routes.context.AppContext`
and declares the dependencies (caller, role) its own routes need.
"""
