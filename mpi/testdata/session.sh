#!/bin/sh
if [ "$SSH_ORIGINAL_COMMAND" != "true trainlet-readiness" ]; then echo "$$" >> '/tmp/trainlet-0/job/worker-0/sessions'; fi
. '/tmp/trainlet-0/job/worker-0/env.sh'
if [ -n "$SSH_ORIGINAL_COMMAND" ]; then exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"; fi
exec "${SHELL:-/bin/sh}" -l
