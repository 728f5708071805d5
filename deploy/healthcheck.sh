#!/bin/sh
# Health check for the vlbatch containers and systemd units.
#   healthcheck.sh api      GET /healthz on the local API
#   healthcheck.sh worker   the worker's Celery node answers a ping over the broker, and, when
#                           VLBATCH_HEARTBEAT_FILE is set and exists, the file changed within
#                           VLBATCH_HEARTBEAT_MAX_AGE_S seconds (default 600)
# After VLBATCH_HEALTH_KILL_AFTER consecutive failures (default 3) a hung worker is restarted:
#   - in a container (plain docker compose never restarts an unhealthy one) by SIGTERM to PID 1, and
#     `restart: unless-stopped` starts a fresh engine;
#   - under systemd, when VLBATCH_HEALTH_RESTART_UNIT names the unit, by `systemctl restart` of it
#     (deploy/systemd/vlbatch-worker-health@.timer runs this every minute).
# Several workers on one host need distinct Celery node names: set VLBATCH_CELERY_NODE to the name the worker
# registers with (default celery@<hostname>, right for one worker per container).
set -u
mode="${1:-worker}"
state="${VLBATCH_HEALTH_STATE:-/tmp/vlbatch-health-failures}"

check() {
    case "$mode" in
    api)
        python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:${VLBATCH_API_PORT:-8000}/healthz', timeout=10)"
        ;;
    worker)
        node="${VLBATCH_CELERY_NODE:-celery@$(hostname)}"
        celery -b "${VLBATCH_BROKER_URL:?VLBATCH_BROKER_URL is not set}" inspect ping -d "$node" -t 20 >/dev/null 2>&1 || return 1
        hb="${VLBATCH_HEARTBEAT_FILE:-}"
        if [ -n "$hb" ] && [ -f "$hb" ]; then
            age=$(( $(date +%s) - $(stat -c %Y "$hb") ))
            [ "$age" -le "${VLBATCH_HEARTBEAT_MAX_AGE_S:-600}" ] || return 1
        fi
        ;;
    *)
        echo "usage: healthcheck.sh api|worker" >&2
        return 2
        ;;
    esac
}

if check; then
    rm -f "$state"
    exit 0
fi
n=$(( $(cat "$state" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$state"
echo "vlbatch $mode unhealthy ($n consecutive)" >&2
if [ "$mode" = worker ] && [ "$n" -ge "${VLBATCH_HEALTH_KILL_AFTER:-3}" ]; then
    rm -f "$state"
    if [ -n "${VLBATCH_HEALTH_RESTART_UNIT:-}" ]; then
        systemctl restart "$VLBATCH_HEALTH_RESTART_UNIT"
    elif [ "$$" != 1 ] && [ -e /.dockerenv ]; then
        kill -TERM 1
    fi
fi
exit 1
