#!/bin/sh
# ssh with this job's keys and pinned host keys (trainlet mpi-launcher).
exec '/usr/bin/ssh' -F '/tmp/trainlet-0/job/launcher/ssh_config' "$@"
