"""Who is calling (authentication) and what they may do (authorization); docs/security.md."""
