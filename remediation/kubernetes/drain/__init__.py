"""The drain the way ``kubectl drain`` does it: policy, Eviction API calls, the runner, the partial drain."""
