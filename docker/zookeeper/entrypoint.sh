#!/bin/bash
# Environment -> zoo.cfg, the official zookeeper image's variables: ZOO_TICK_TIME, ZOO_INIT_LIMIT,
# ZOO_SYNC_LIMIT, ZOO_MAX_CLIENT_CNXNS, ZOO_4LW_COMMANDS_WHITELIST, ZOO_ADMINSERVER_ENABLED,
# ZOO_AUTOPURGE_PURGEINTERVAL, ZOO_AUTOPURGE_SNAPRETAINCOUNT, ZOO_DATA_DIR, ZOO_DATA_LOG_DIR, ZOO_PORT.
set -euo pipefail
conf=/opt/zookeeper/conf/zoo.cfg
cat > "$conf" <<CFG
tickTime=${ZOO_TICK_TIME:-2000}
initLimit=${ZOO_INIT_LIMIT:-10}
syncLimit=${ZOO_SYNC_LIMIT:-5}
dataDir=${ZOO_DATA_DIR:-/data}
dataLogDir=${ZOO_DATA_LOG_DIR:-/datalog}
clientPort=${ZOO_PORT:-2181}
maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-0}
admin.enableServer=${ZOO_ADMINSERVER_ENABLED:-false}
4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr,ruok,mntr}
autopurge.snapRetainCount=${ZOO_AUTOPURGE_SNAPRETAINCOUNT:-3}
autopurge.purgeInterval=${ZOO_AUTOPURGE_PURGEINTERVAL:-1}
CFG
echo "starting ZooKeeper with:"; sed 's/^/  /' "$conf"
exec java ${ZOO_HEAP_OPTS:--Xms64m -Xmx256m} -XX:+UseG1GC -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true \
  -Dlogback.configurationFile=/opt/zookeeper/conf/logback.xml -Dzookeeper.log.dir=/tmp \
  -cp '/opt/zookeeper/libs/*' org.apache.zookeeper.server.ZooKeeperServerMain "$conf"
