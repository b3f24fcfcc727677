# shellcheck shell=bash
# Sourced by the scripts that run daemons as separate hosts in network
# namespaces (tests/netns_cluster_test.sh, tests/bench/ps_loss_pause_netns.sh).

# netns_host TAG SWITCH HOST ADDRESS: host HOST as namespace TAG$HOST, with
# ADDRESS/24 on its eth0, the other end of that veth pair (pHOST) on the
# bridge br0 of namespace SWITCH. Status 1 when a step fails.
netns_host() {
  local tag="$1" sw="$2" h="$3" address="$4" ns="$1$3"
  ip netns add "$ns" &&
    ip -n "$ns" link set lo up &&
    ip link add "${tag}$h" netns "$ns" type veth peer name "p$h" netns "$sw" &&
    ip -n "$ns" link set "${tag}$h" name eth0 &&
    ip -n "$ns" addr add "$address/24" dev eth0 &&
    ip -n "$ns" link set eth0 up &&
    ip -n "$sw" link set "p$h" master br0 &&
    ip -n "$sw" link set "p$h" up
}
