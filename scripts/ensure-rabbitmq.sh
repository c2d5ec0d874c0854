#!/usr/bin/env bash
# Make sure RabbitMQ answers on 127.0.0.1:5672 for tests/gateway: start it with
# `rabbitmq-server -detached` if it is installed but not running; fail with a clear message otherwise.
set -u
HOST=127.0.0.1
PORT=5672
WAIT=${RABBITMQ_WAIT:-60}

reachable() { (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; }

if reachable; then
    exit 0
fi
if ! command -v rabbitmq-server >/dev/null 2>&1; then
    echo "ensure-rabbitmq: RabbitMQ is not reachable on $HOST:$PORT and rabbitmq-server is not installed" \
         "(apt-get install rabbitmq-server); the gateway tests need it" >&2
    exit 1
fi
echo "ensure-rabbitmq: starting rabbitmq-server -detached" >&2
if [ "$(id -u)" -eq 0 ] || ! command -v sudo >/dev/null 2>&1; then
    rabbitmq-server -detached >/dev/null 2>&1 || true
else
    sudo rabbitmq-server -detached >/dev/null 2>&1 || true
fi
for _ in $(seq "$WAIT"); do
    if reachable; then
        # the port opens before the application has finished booting
        if command -v rabbitmqctl >/dev/null 2>&1; then
            rabbitmqctl await_startup >/dev/null 2>&1 || true
        fi
        echo "ensure-rabbitmq: RabbitMQ is up on $HOST:$PORT" >&2
        exit 0
    fi
    sleep 1
done
echo "ensure-rabbitmq: RabbitMQ did not come up on $HOST:$PORT within ${WAIT}s" \
     "(see /var/log/rabbitmq/); the gateway tests need it" >&2
exit 1
