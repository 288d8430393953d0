#!/usr/bin/env bash
# A real Slurm on this machine for the Slurm fleet tests (tests/test_slurm_fleet.py): Debian's
# slurm-wlm and munge, one controller and two logical nodes (one `slurmd -N` each, so that jobs
# report different node names), GPUs declared as gres backed by plain files. No accounting
# database: `sacct` fails here on purpose, the fleet code must not depend on it.
# Idempotent (a second run finds everything up and returns); needs root.
# Prints the variables the tests read (BISECT_LAB_SLURM_PARTITION) on its last line.
set -euo pipefail

[ "$(id -u)" -eq 0 ] || { echo "slurm-setup: needs root" >&2; exit 1; }
NODES=(${SLURM_SETUP_NODES:-bl-node1 bl-node2})
PARTITION="${SLURM_SETUP_PARTITION:-debug}"
CPUS=1            # one job slot per logical node: two jobs at once run on two named nodes
GPUS=2            # per node, as gres backed by plain files (no device behind them)
STATE=/var/lib/bisect-lab-slurm

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

# munge: a key of our own once, its runtime folders every time (/run is a tmpfs).
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    if id munge >/dev/null 2>&1; then
        su -s /bin/sh munge -c "/usr/sbin/munged" || /usr/sbin/munged --force
    else
        /usr/sbin/munged --force
    fi
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

mkdir -p /etc/slurm "$STATE/ctld" /var/log/slurm /run/slurm
for n in "${NODES[@]}"; do
    mkdir -p "$STATE/$n" "$STATE/gpus/$n"
    for g in $(seq 0 $((GPUS - 1))); do : > "$STATE/gpus/$n/gpu$g"; done
done

conf=$(mktemp)
{
    echo "# Written by bisect-lab's .ci/slurm-setup.sh: localhost, logical nodes, no accounting."
    echo "ClusterName=bisectlab"
    echo "SlurmctldHost=localhost"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SlurmdParameters=config_overrides"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "GresTypes=gpu"
    echo "StateSaveLocation=$STATE/ctld"
    echo "SlurmdSpoolDir=$STATE/%n"
    echo "SlurmctldPidFile=/run/slurm/slurmctld.pid"
    echo "SlurmdPidFile=/run/slurm/slurmd-%n.pid"
    echo "SlurmctldLogFile=/var/log/slurm/slurmctld.log"
    echo "SlurmdLogFile=/var/log/slurm/slurmd-%n.log"
    echo "SlurmctldPort=6817"
    echo "ReturnToService=2"
    echo "SchedulerType=sched/backfill"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "MpiDefault=none"
    echo "KillWait=5"
    echo "MinJobAge=300"
    echo "InactiveLimit=0"
    echo "SlurmdTimeout=60"
    port=17001
    for n in "${NODES[@]}"; do
        echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$port CPUs=$CPUS Gres=gpu:$GPUS RealMemory=1000 State=UNKNOWN"
        port=$((port + 1))
    done
    echo "PartitionName=$PARTITION Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} > "$conf"
gres=$(mktemp)
for n in "${NODES[@]}"; do
    echo "NodeName=$n Name=gpu File=$STATE/gpus/$n/gpu[0-$((GPUS - 1))]" >> "$gres"
done

changed=0
cmp -s "$conf" /etc/slurm/slurm.conf || { cp "$conf" /etc/slurm/slurm.conf; changed=1; }
cmp -s "$gres" /etc/slurm/gres.conf || { cp "$gres" /etc/slurm/gres.conf; changed=1; }
rm -f "$conf" "$gres"
chmod 0644 /etc/slurm/slurm.conf /etc/slurm/gres.conf

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
stop() { if running "$1"; then kill "$(cat "$1")"; for _ in $(seq 50); do running "$1" || break; sleep 0.1; done; fi; }

if [ "$changed" -eq 1 ]; then       # a new configuration: restart what runs on the old one
    for n in "${NODES[@]}"; do stop "/run/slurm/slurmd-$n.pid"; done
    stop /run/slurm/slurmctld.pid
fi
running /run/slurm/slurmctld.pid || slurmctld
for n in "${NODES[@]}"; do
    running "/run/slurm/slurmd-$n.pid" || slurmd -N "$n"
done

# Up when every node is idle (or already running jobs: a second run of this script).
up() { ! sinfo -h -N -p "$PARTITION" -o '%t' 2>/dev/null | grep -qvE '^(idle|mix|alloc|comp)$' \
       && [ -n "$(sinfo -h -N -p "$PARTITION" -o '%t' 2>/dev/null)" ]; }
for _ in $(seq 120); do
    up && break
    # A node left down by an earlier run comes back once its slurmd answers.
    for n in "${NODES[@]}"; do scontrol update NodeName="$n" State=RESUME >/dev/null 2>&1 || true; done
    sleep 0.5
done
sinfo -N -p "$PARTITION"
if ! up; then
    echo "slurm-setup: nodes not up ($(sinfo -h -N -o '%N %t' | tr '\n' ' ')); see /var/log/slurm/" >&2
    exit 1
fi
echo "BISECT_LAB_SLURM_PARTITION=$PARTITION"
