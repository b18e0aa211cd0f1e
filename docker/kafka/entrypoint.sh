#!/bin/bash
# Environment -> server.properties, the apache/kafka image's convention: KAFKA_A_B___C__D -> a.b-c_d
# (___ is '-', __ is '_', _ is '.'). CLUSTER_ID formats the log dir once (skipped when already formatted).
set -euo pipefail
conf=/opt/kafka/config/server.properties
: > "$conf"
while IFS='=' read -r name value; do
  case "$name" in
    KAFKA_HEAP_OPTS|KAFKA_JVM_OPTS) continue ;;
    KAFKA_*)
      key="${name#KAFKA_}"
      key="$(printf '%s' "$key" | tr 'A-Z' 'a-z' | sed -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g')"
      printf '%s=%s\n' "$key" "$value" >> "$conf" ;;
  esac
done < <(env)
: "${CLUSTER_ID:?CLUSTER_ID must be set (base64url of 16 bytes)}"
cp=/opt/kafka/libs/*
java_opts=(${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
  -Djava.net.preferIPv4Stack=true -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties
  -Dkafka.logs.dir=/tmp/kafka-logs ${KAFKA_JVM_OPTS:-})
logdir="$(sed -n 's/^log\.dirs=//p' "$conf")"
if [ ! -f "${logdir:-/var/lib/kafka/data}/meta.properties" ]; then
  echo "formatting ${logdir} for cluster ${CLUSTER_ID}"
  java "${java_opts[@]}" -cp "$cp" kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$conf"
fi
echo "starting Kafka node ${KAFKA_NODE_ID:-?} with:"; sed 's/^/  /' "$conf"
exec java "${java_opts[@]}" -cp "$cp" kafka.Kafka "$conf"
