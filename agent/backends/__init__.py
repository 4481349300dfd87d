"""Sources of GPU telemetry. Each backend turns one outside source into our own models."""
