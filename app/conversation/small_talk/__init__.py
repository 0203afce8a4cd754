"""Small talk: the kinds the service recognises and the answers it ships for them."""
