# Shared helpers of the multi-host test scripts (sourced): N "hosts" on this
# machine, each a network namespace with one veth link (eth0, 10.177.0.<i+1>)
# to a bridge in a launcher namespace (br0, 10.177.0.254) where mpirun runs.
# Open MPI starts its daemons through an rsh agent that enters the host's
# namespace (ip netns exec) instead of ssh, and talks TCP over 10.177.0.0/24
# only. Every namespace and the processes in it are removed in the EXIT trap,
# whatever happens. docs/reshard.md ("Multi-host runs on one machine").
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NET=ptcnet$$ # namespace names: $NET-l (launcher, bridge), $NET-h<i> (hosts)
NET_SUBNET=10.177.0.0/24
NET_N=0

net_cleanup() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NET-" || true); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$T"
}
trap net_cleanup EXIT

# A lost peer ends a TCP connection in seconds, not after the default ~15
# minutes of retransmissions (tcp_retries2=15) or ~2 minutes of connection
# attempts (tcp_syn_retries=6). Per namespace: the machine's own are untouched.
net_fast_tcp() {
    ip netns exec "$1" sysctl -qw net.ipv4.tcp_retries2=3 net.ipv4.tcp_syn_retries=1
}

# net_setup N: the launcher namespace and N host namespaces, linked, with a
# hostfile (one slot per host, in host order) and the launch agent. Exits 77
# (skipped) only where no network namespace can be made here (not root, no
# iproute2, no CAP_SYS_ADMIN), and never under CI (CI=true), whose machines
# can; anything failing after that fails the test.
net_setup() {
    local i h
    if ! command -v ip >/dev/null || ! ip netns add "$NET-l" 2>"$T/netns.err"; then
        if [ "${CI:-}" = true ]; then
            echo "FAIL: cannot make a network namespace on a CI machine: $(cat "$T/netns.err" 2>/dev/null)" >&2; exit 1
        fi
        echo "skipped: cannot make a network namespace here: $(cat "$T/netns.err" 2>/dev/null)"; exit 77
    fi
    ip -n "$NET-l" link set lo up
    ip -n "$NET-l" link add br0 type bridge
    ip -n "$NET-l" addr add 10.177.0.254/24 dev br0
    ip -n "$NET-l" link set br0 up
    : >"$T/hostfile"
    for i in $(seq 0 $(($1 - 1))); do
        h="$NET-h$i"
        ip netns add "$h"
        ip -n "$h" link set lo up
        ip -n "$NET-l" link add "h$i" type veth peer name eth0 netns "$h"
        ip -n "$NET-l" link set "h$i" master br0 up
        ip -n "$h" addr add "10.177.0.$((i + 1))/24" dev eth0
        ip -n "$h" link set eth0 up
        net_fast_tcp "$h"
        echo "10.177.0.$((i + 1)) slots=1" >>"$T/hostfile"
    done
    net_fast_tcp "$NET-l"
    NET_N=$1
    # The launch agent, in place of ssh: "agent [-opts] HOST CMD..." runs CMD
    # by a shell inside HOST's namespace (HOST = 10.177.0.<i+1> -> h<i>), with
    # a hostname of its own (a UTS namespace): Open MPI names its session
    # directories in /tmp, which the hosts share, after the hostname; with one
    # name for all, two daemons race to make the same directory ("A call to
    # mkdir was unable to create the desired directory ... File exists").
    # With NET_PRIVATE=PATH (set before net_setup), every host has a private
    # disk: inside its mount namespace (ip netns exec makes one per command)
    # PATH is host i's own folder $T/disks/h<i>, and an empty tmpfs hides
    # $T/disks, so no host can open another's files.
    local mounts=""
    if [ -n "${NET_PRIVATE:-}" ]; then
        mkdir -p "$NET_PRIVATE"
        for i in $(seq 0 $(($1 - 1))); do mkdir -p "$T/disks/h$i"; done
        mounts="mount --bind $T/disks/h\$i $NET_PRIVATE && mount -t tmpfs none $T/disks && "
    fi
    cat >"$T/agent" <<AGENT
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1
shift
i=\$((\${host##*.} - 1))
exec ip netns exec "$NET-h\$i" unshare --uts /bin/sh -c "hostname $NET-h\$i && $mounts\$*"
AGENT
    chmod +x "$T/agent"
}

# "${NET_MPIRUN[@]}" ARGS...: mpirun in the launcher namespace, one process
# per host in host order (rank i on host i), TCP over the bridge's subnet
# only. rtc_hwloc_vmhole=none: Open MPI 4.1.4's orted otherwise crashes
# (SIGSEGV in hwloc_shmem_topology_write) when it starts on a "remote" node
# here. PMIX_MCA_gds=hash: PMIx's shared-memory store prints a spurious
# "PMIX ERROR: ERROR in file .../dstore_base.c" when run as root.
# oob_tcp_keepalive_*: mpirun and its daemons probe their (idle) control
# connections every second after 2 s, so a host cut off is declared lost
# within ~5 s ("ORTE has lost communication with a remote daemon"): mpirun
# ends the job, and the daemon on the lost host kills its processes. Without
# them mpirun waits forever for the lost daemon, and the lost host's
# processes stay.
export PMIX_MCA_gds=hash
# The namespace hosts are processes of one machine, whose hostfiles give
# mpirun slots that its cores do not have: a rank waiting in MPI yields its
# core (what Open MPI does by itself when it knows it runs oversubscribed)
# instead of spinning beside the ranks and tests that have work.
export OMPI_MCA_mpi_yield_when_idle=1
# NET_MPI_OPTS: the settings above, for any mpirun run in the launcher namespace
NET_MPI_OPTS=(--mca plm_rsh_agent "$T/agent"
    --mca rtc_hwloc_vmhole none --mca btl tcp,self
    --mca btl_tcp_if_include "$NET_SUBNET" --mca oob_tcp_if_include "$NET_SUBNET"
    --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3
    -x OPENBLAS_NUM_THREADS -x PMIX_MCA_gds)
NET_MPIRUN=(ip netns exec "$NET-l" mpirun --allow-run-as-root --hostfile "$T/hostfile"
    --map-by node --bind-to none "${NET_MPI_OPTS[@]}")
net_mpirun() { "${NET_MPIRUN[@]}" "$@"; }
# json FILE KEY: the value of KEY in the JSON object of FILE
json() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# net_check_private PATH: with NET_PRIVATE=PATH, host 1 sees its own disk
# ($T/disks/h1) at PATH and host 0 does not see it there
net_check_private() {
    touch "$T/disks/h1/mark"
    [ "$("$T/agent" 10.177.0.2 "ls $1")" = mark ] && ok || bad "host 1's $1 is not its own disk"
    [ "$("$T/agent" 10.177.0.1 "ls -A $1 | wc -l")" = 0 ] && ok || bad "host 0 sees host 1's disk at $1"
    rm "$T/disks/h1/mark"
}

# net_mpirun_script FILE: an executable FILE that runs mpirun in the launcher
# namespace with NET_MPI_OPTS and its own arguments (no hostfile or mapping:
# for a launcher that passes its own, as ptc elastic --mpirun does).
net_mpirun_script() {
    { echo '#!/bin/sh'
      printf 'exec ip netns exec %q mpirun' "$NET-l"
      printf ' %q' "${NET_MPI_OPTS[@]}"
      echo ' "$@"'; } >"$1"
    chmod +x "$1"
}

# net_bytes I tx|rx: the bytes host I's eth0 has sent / received so far.
net_bytes() { ip netns exec "$NET-h$1" cat "/sys/class/net/eth0/statistics/$2_bytes"; }
