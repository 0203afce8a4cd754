"""HTTP routes: /match (+ /match/batch, /feedback), health and metrics, and the /admin API."""
