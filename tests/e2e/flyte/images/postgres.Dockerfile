# PostgreSQL for the Flyte backend: Debian's package in a debootstrap rootfs (BASE, no registry).
# A throwaway cluster made at start (trust auth, no fsync): the e2e keeps nothing across restarts.
ARG BASE
FROM ${BASE}
RUN printf '%s\n' '#!/bin/sh' 'set -e' \
      'bin=$(ls -d /usr/lib/postgresql/*/bin | tail -n1); data=/tmp/pgdata' \
      '[ -s "$data/PG_VERSION" ] || { "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null;' \
      '  echo "host all all 0.0.0.0/0 trust" >>"$data/pg_hba.conf";' \
      '  echo "CREATE DATABASE runs" | "$bin/postgres" --single -D "$data" postgres >/dev/null; }' \
      'exec "$bin/postgres" -D "$data" -k /tmp -c listen_addresses=* -c fsync=off -c jit=off' \
      >/usr/local/bin/postgres-entrypoint && chmod +x /usr/local/bin/postgres-entrypoint
USER postgres
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
