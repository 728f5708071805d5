#!/bin/bash
# Container entrypoint: load the CANN/ATB environment that the vllm-ascend image only puts in ~/.bashrc, so
# `vlbatch worker` started by docker (not by an interactive shell) finds libascendcl and the driver.
set -e
for f in /usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/nnal/atb/set_env.sh; do
    # shellcheck disable=SC1090
    [ -f "$f" ] && source "$f"
done
export LD_LIBRARY_PATH="/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/common:/usr/local/Ascend/driver/lib64/driver:${LD_LIBRARY_PATH}"
jemalloc="/usr/lib/$(uname -m)-linux-gnu/libjemalloc.so.2"
[ -f "$jemalloc" ] && export LD_PRELOAD="$jemalloc${LD_PRELOAD:+:$LD_PRELOAD}"
exec "$@"
