#!/usr/bin/env bash
# Start (or stop) one MongoDB topology in Docker, for the public workflow's jobs and for
# a contributor's machine alike (CONTRIBUTING.md, "Every topology with Docker"):
#
#   .ci/topology.sh start standalone|replset|sharded|auth [VERSION]   (VERSION: 8.0)
#   .ci/topology.sh stop
#
# `start` waits until the deployment takes writes, then prints the connection string on
# its last line (eval-able: `export RUNNERQ_TEST_MONGO_URI=...`). Every process of a
# topology runs in one container, the members addressing each other as 127.0.0.1:PORT
# and the ports published one to one, so the same addresses work inside and outside on
# Linux, macOS and Windows alike.
#
#   standalone  one mongod, no replica set: no change streams, no transactions (the
#               tail falls back to polling on the server's 40573)
#   replset     three members (27017-27019, replica set rs0): the stepdown job
#   sharded     a mongos (27017), a config server replica set and two shards, each a
#               one-member replica set, inside the container
#   auth        a standalone mongod with authentication, user runnerq
set -euo pipefail
NAME=rq-topology
PASSWORD=${RUNNERQ_TOPOLOGY_PASSWORD:-runnerq-ci-secret}

# js CONTAINER-PORT SCRIPT: run mongosh SCRIPT against a process of the container.
js() { docker exec "$NAME" mongosh --quiet --port "$1" --eval "$2"; }

# until_ok PORT SCRIPT WHAT: wait (up to 90 s) until SCRIPT prints true on PORT.
until_ok() {
  for _ in $(seq 90); do
    [ "$(js "$1" "$2" 2>/dev/null || true)" = true ] && return 0
    sleep 1
  done
  echo "timed out waiting for $3" >&2
  docker logs "$NAME" 2>&1 | tail -n 50 >&2
  exit 1
}

# run PUBLISH... -- SCRIPT: the container, running the bash SCRIPT (mongods forked, then
# kept alive by sleep).
run() {
  local ports=()
  while [ "$1" != "--" ]; do ports+=(-p "127.0.0.1:$1:$1"); shift; done
  shift
  docker run -d --rm --name "$NAME" "${ports[@]}" --entrypoint bash "mongo:$VERSION" \
    -c "set -e; $1; exec sleep infinity" >/dev/null
}

# mongod NAME PORT ARGS...: a forked mongod line for run's script.
mongod_line() {
  local dir=$1 port=$2
  shift 2
  echo "mkdir -p /data/$dir && mongod --port $port --bind_ip_all --dbpath /data/$dir \
--logpath /data/$dir.log --fork $*"
}

initiate() {  # initiate PORT SET MEMBER-PORTS... [configsvr]
  local port=$1 set=$2 members="" n=0 extra=""
  shift 2
  for p in "$@"; do
    [ "$p" = configsvr ] && { extra=", configsvr: true"; continue; }
    members="$members{_id: $n, host: '127.0.0.1:$p'},"
    n=$((n + 1))
  done
  until_ok "$port" 'db.adminCommand({ping: 1}).ok == 1' "mongod on $port"
  js "$port" "rs.initiate({_id: '$set', members: [$members]$extra})" >/dev/null
  until_ok "$port" 'db.hello().isWritablePrimary' "a primary of $set"
}

case "${1:-}" in
  start)
    TOPOLOGY=${2:?standalone, replset, sharded or auth}
    VERSION=${3:-8.0}
    case "$TOPOLOGY" in
      standalone)
        run 27017 -- "$(mongod_line db 27017)"
        until_ok 27017 'db.adminCommand({ping: 1}).ok == 1' "the standalone mongod"
        uri="mongodb://127.0.0.1:27017/?directConnection=true" ;;
      replset)
        run 27017 27018 27019 -- "$(mongod_line a 27017 --replSet rs0); \
$(mongod_line b 27018 --replSet rs0); $(mongod_line c 27019 --replSet rs0)"
        initiate 27017 rs0 27017 27018 27019
        until_ok 27017 \
          'rs.status().members.filter(m => ["PRIMARY", "SECONDARY"].includes(m.stateStr)).length == 3' \
          "three members up (a primary, two secondaries)"
        uri="mongodb://127.0.0.1:27017,127.0.0.1:27018,127.0.0.1:27019/?replicaSet=rs0" ;;
      sharded)
        run 27017 -- "$(mongod_line cfg 27100 --configsvr --replSet cfg); \
$(mongod_line s1 27101 --shardsvr --replSet s1); $(mongod_line s2 27102 --shardsvr --replSet s2)"
        initiate 27100 cfg 27100 configsvr
        initiate 27101 s1 27101
        initiate 27102 s2 27102
        docker exec "$NAME" mongos --port 27017 --bind_ip_all --configdb cfg/127.0.0.1:27100 \
          --logpath /data/mongos.log --fork >/dev/null
        until_ok 27017 'db.adminCommand({ping: 1}).ok == 1' "the mongos"
        js 27017 "sh.addShard('s1/127.0.0.1:27101'); sh.addShard('s2/127.0.0.1:27102')" >/dev/null
        until_ok 27017 'db.adminCommand({listShards: 1}).shards.length == 2' "two shards"
        uri="mongodb://127.0.0.1:27017/" ;;
      auth)
        run 27017 -- "$(mongod_line db 27017 --auth)"
        until_ok 27017 'db.adminCommand({ping: 1}).ok == 1' "the mongod"
        # The localhost exception: the first user is created from inside the container.
        js 27017 "db.getSiblingDB('admin').createUser({user: 'runnerq', pwd: '$PASSWORD', \
roles: ['root']})" >/dev/null
        uri="mongodb://runnerq:$PASSWORD@127.0.0.1:27017/?authSource=admin&directConnection=true" ;;
      *) echo "unknown topology $TOPOLOGY: standalone, replset, sharded or auth" >&2; exit 2 ;;
    esac
    echo "$uri" ;;
  stop)
    docker stop "$NAME" >/dev/null 2>&1 || true ;;
  logs)
    docker exec "$NAME" bash -c 'tail -n 100 /data/*.log' || true ;;
  *)
    echo "usage: $0 start standalone|replset|sharded|auth [VERSION] | stop | logs" >&2
    exit 2 ;;
esac
