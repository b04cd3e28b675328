#!/bin/sh
# ssh with this job's keys and pinned host keys (trainlet mpi-launcher).
# COMMAND started early: wait until every worker passed the readiness check.
if [ -p '/tmp/trainlet-0/job/launcher/ssh-gate' ]; then : <'/tmp/trainlet-0/job/launcher/ssh-gate'; fi
exec '/usr/bin/ssh' -F '/tmp/trainlet-0/job/launcher/ssh_config' "$@"
