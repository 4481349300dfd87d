"""The requeue of training jobs: pure decisions over owner chains, and the API calls that carry them out."""
