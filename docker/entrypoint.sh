#!/bin/sh
# Container entrypoint: bring the database schema up to date, then run the given command, or
# serve /match when none is given.
#
#   docker run IMAGE                       -> faq db upgrade; faq serve --host $FAQ_HOST --port $FAQ_PORT
#   docker run IMAGE faq kb import F.jsonl -> faq db upgrade; faq kb import F.jsonl
#
# Migrations run before every command because one-off commands (kb import, index build) need the
# tables as much as the server does, and `faq db upgrade` is a cheap no-op when already at head.
# FAQ_MIGRATE=0 skips it, e.g. for extra replicas when one process already owns migrations.
set -eu

if [ "${FAQ_MIGRATE:-1}" != "0" ]; then
    faq db upgrade
fi

if [ "$#" -gt 0 ]; then
    exec "$@"
fi

# exec so the server is PID 1 and receives `docker stop`'s SIGTERM directly (graceful shutdown)
exec faq serve --host "${FAQ_HOST:-0.0.0.0}" --port "${FAQ_PORT:-8000}"
