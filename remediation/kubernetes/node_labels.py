"""Read a node's labels once, for choosing its behaviour profile (``remediation/plan/profiles.py``)."""

from __future__ import annotations

from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from core.settings import SettingsError


def read_node_labels(api_client: Any | None, kubeconfig: str | None, node: str) -> dict[str, str]:
    """The labels of Node ``node`` (the agent may get its node); raises SettingsError with one line."""
    owned = api_client is None
    try:
        if api_client is None:
            configuration = client.Configuration()
            loader: Any = config  # the config helpers are untyped
            if kubeconfig is None:
                loader.load_incluster_config(client_configuration=configuration)
            else:
                loader.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
            api_client = client.ApiClient(configuration)
        found = client.CoreV1Api(api_client).read_node(node)
    except (ApiException, ConfigException, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or str(error).splitlines()[0]
        raise SettingsError(
            f"profiles: cannot read node {node}'s labels to choose its profile: {reason}"
        ) from None
    finally:
        if owned and api_client is not None:
            api_client.close()
    metadata = found.metadata
    return dict((metadata.labels if metadata is not None else None) or {})
