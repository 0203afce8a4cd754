"""HTTP routes: /match (+ /match/batch, /feedback), health and metrics, the /admin API and its review queues."""
