#!/bin/sh
# The compose proxy's TLS pair (docker-compose.yml, service `tls`): a self-signed certificate for
# FAQ_TLS_NAME (default localhost), written once into the given folder and kept on later starts, so a real
# certificate and key put there in its place are never overwritten.
#
#   sh docker/tls-cert.sh DIR     -> DIR/cert.pem, DIR/key.pem
set -eu

dir=${1:?usage: tls-cert.sh DIR}
name=${FAQ_TLS_NAME:-localhost}
if [ -s "$dir/cert.pem" ] && [ -s "$dir/key.pem" ]; then
    echo "tls: keeping $dir/cert.pem"
    exit 0
fi
mkdir -p "$dir"
umask 077
san="DNS:localhost,IP:127.0.0.1"
[ "$name" = localhost ] || san="DNS:$name,$san"
openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=$name" -addext "subjectAltName=$san" \
    -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
chmod 644 "$dir/cert.pem"
echo "tls: wrote a self-signed certificate for $name to $dir/cert.pem"
