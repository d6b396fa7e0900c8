//! Which kernel counters count which drops: each counter with the drop reasons the kernel frees
//! packets with at the place where it increments that counter (read from the kernel source).
//!
//! A reason may be narrowed to a kernel function with `REASON@function` when the same reason is
//! also used elsewhere (`NO_SOCKET` is both UDP's and TCP's). A counter with no reasons counts
//! packets that the kernel frees without calling them drops (with `consume_skb`): the probe
//! never sees them.
use crate::vocab::counter::Counter;

/// Whose drops a counter covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One network namespace (the SNMP MIBs, devices).
    Netns,
    /// The whole machine (`/proc/net/softnet_stat` is per CPU, the same in every namespace).
    Global,
}

/// One counter and the drop reasons it corresponds to.
#[derive(Clone, Copy, Debug)]
pub struct CounterMap {
    /// `Group:Name` as in /proc/net/snmp (`nstat` prints `GroupName`); `Dev:*:RxDrop` stands
    /// for every interface.
    pub counter: &'static str,
    /// Drop reasons (`REASON` or `REASON@function`) of the same events.
    pub reasons: &'static [&'static str],
    /// Where the kernel counts it (for review against the source).
    pub source: &'static str,
    /// Namespace or machine.
    pub scope: Scope,
}

const fn c(
    counter: &'static str,
    reasons: &'static [&'static str],
    source: &'static str,
) -> CounterMap {
    CounterMap {
        counter,
        reasons,
        source,
        scope: Scope::Netns,
    }
}

/// The counters dropscope reads, with their reasons (kernel 6.x source, net/). The UDP and IP
/// MIBs are per address family (`Udp:` is IPv4, `Udp6:` IPv6), TCP's are shared.
pub const COUNTERS: &[CounterMap] = &[
    c(
        "Udp:NoPorts",
        &["NO_SOCKET@__udp4_lib_rcv"],
        "ipv4/udp.c __udp4_lib_rcv: UDP_MIB_NOPORTS, then sk_skb_reason_drop(NO_SOCKET)",
    ),
    c(
        "Udp:RcvbufErrors",
        &["SOCKET_RCVBUFF"],
        "ipv4/udp.c __udp_queue_rcv_skb: -ENOMEM from the enqueue counts UDP_MIB_RCVBUFERRORS and drops with SOCKET_RCVBUFF",
    ),
    c(
        "Udp:MemErrors",
        &["PROTO_MEM"],
        "ipv4/udp.c __udp_queue_rcv_skb: other enqueue errors count UDP_MIB_MEMERRORS and drop with PROTO_MEM",
    ),
    c(
        "Udp:InCsumErrors",
        &["UDP_CSUM"],
        "ipv4/udp.c __udp4_lib_rcv csum_error / udp_queue_rcv_one_skb: UDP_MIB_CSUMERRORS with UDP_CSUM",
    ),
    c(
        "Udp6:NoPorts",
        &["NO_SOCKET@__udp6_lib_rcv"],
        "ipv6/udp.c __udp6_lib_rcv: UDP_MIB_NOPORTS (IPv6 MIB), then sk_skb_reason_drop(NO_SOCKET)",
    ),
    c(
        "Udp6:RcvbufErrors",
        &["SOCKET_RCVBUFF"],
        "ipv6/udp.c __udpv6_queue_rcv_skb: -ENOMEM counts UDP_MIB_RCVBUFERRORS and drops with SOCKET_RCVBUFF",
    ),
    c(
        "Udp6:MemErrors",
        &["PROTO_MEM"],
        "ipv6/udp.c __udpv6_queue_rcv_skb: other enqueue errors count UDP_MIB_MEMERRORS with PROTO_MEM",
    ),
    c(
        "Udp6:InCsumErrors",
        &["UDP_CSUM"],
        "ipv6/udp.c __udp6_lib_rcv csum_error / udpv6_queue_rcv_one_skb: UDP_MIB_CSUMERRORS with UDP_CSUM",
    ),
    c(
        "Ip6:InUnknownProtos",
        &["IP_NOPROTO"],
        "ipv6/ip6_input.c ip6_protocol_deliver_rcu: IPSTATS_MIB_INUNKNOWNPROTOS with IP_NOPROTO",
    ),
    c(
        "Icmp6:InCsumErrors",
        &["ICMP_CSUM"],
        "ipv6/icmp.c icmpv6_rcv csum_error: ICMP6_MIB_CSUMERRORS with ICMP_CSUM",
    ),
    c(
        "Tcp:InCsumErrors",
        &["TCP_CSUM"],
        "ipv4/tcp_ipv4.c tcp_v4_rcv / tcp_v4_do_rcv csum_error: TCP_MIB_CSUMERRORS with TCP_CSUM",
    ),
    c(
        "TcpExt:ListenOverflows",
        &["TCP_LISTEN_OVERFLOW"],
        "ipv4/tcp_input.c tcp_conn_request (accept queue full at the SYN: the SYN is consumed, not dropped); ipv4/tcp_ipv4.c tcp_v4_syn_recv_sock (at the final ACK: tcp_check_req drops with TCP_LISTEN_OVERFLOW)",
    ),
    c(
        "TcpExt:ListenDrops",
        &["TCP_LISTEN_OVERFLOW"],
        "tcp_listendrop(): every ListenOverflows event plus other failures to create a child; SYN-stage refusals are consumed, not dropped",
    ),
    c(
        "TcpExt:TCPReqQFullDrop",
        &[],
        "ipv4/tcp_input.c tcp_conn_request: SYN queue full without syncookies; the SYN is consumed, not dropped",
    ),
    c(
        "TcpExt:TCPBacklogDrop",
        &["SOCKET_BACKLOG"],
        "ipv4/tcp_ipv4.c tcp_add_backlog: LINUX_MIB_TCPBACKLOGDROP with SOCKET_BACKLOG",
    ),
    c(
        "TcpExt:TCPZeroWindowDrop",
        &["TCP_ZEROWINDOW"],
        "ipv4/tcp_input.c tcp_data_queue: LINUX_MIB_TCPZEROWINDOWDROP with TCP_ZEROWINDOW",
    ),
    c(
        "TcpExt:TCPRcvQDrop",
        &["PROTO_MEM"],
        "ipv4/tcp_input.c tcp_data_queue: no receive memory, LINUX_MIB_TCPRCVQDROP with PROTO_MEM",
    ),
    c(
        "TcpExt:TCPOFODrop",
        &["PROTO_MEM"],
        "ipv4/tcp_input.c tcp_data_queue_ofo: no memory for out-of-order data, LINUX_MIB_TCPOFODROP with PROTO_MEM",
    ),
    c(
        "TcpExt:TCPOFOMerge",
        &["TCP_OFOMERGE"],
        "ipv4/tcp_input.c tcp_data_queue_ofo: LINUX_MIB_TCPOFOMERGE with TCP_OFOMERGE",
    ),
    c(
        "TcpExt:PAWSEstab",
        &["TCP_RFC7323_PAWS"],
        "ipv4/tcp_input.c tcp_validate_incoming: LINUX_MIB_PAWSESTABREJECTED with TCP_RFC7323_PAWS",
    ),
    c(
        "TcpExt:PAWSOldAck",
        &["TCP_RFC7323_PAWS_ACK"],
        "ipv4/tcp_input.c tcp_validate_incoming: LINUX_MIB_PAWS_OLD_ACK with TCP_RFC7323_PAWS_ACK",
    ),
    c(
        "TcpExt:TSEcrRejected",
        &["TCP_RFC7323_TSECR"],
        "ipv4/tcp_minisocks.c tcp_check_req: LINUX_MIB_TSECRREJECTED with TCP_RFC7323_TSECR",
    ),
    c(
        "TcpExt:TCPMinTTLDrop",
        &["TCP_MINTTL"],
        "ipv4/tcp_ipv4.c tcp_v4_rcv: LINUX_MIB_TCPMINTTLDROP with TCP_MINTTL",
    ),
    c(
        "TcpExt:TCPAbortOnData",
        &["TCP_ABORT_ON_DATA"],
        "ipv4/tcp_input.c tcp_rcv_state_process: LINUX_MIB_TCPABORTONDATA with TCP_ABORT_ON_DATA",
    ),
    c(
        "TcpExt:TCPMD5NotFound",
        &["TCP_MD5NOTFOUND"],
        "ipv4/tcp.c tcp_inbound_md5_hash: LINUX_MIB_TCPMD5NOTFOUND with TCP_MD5NOTFOUND",
    ),
    c(
        "TcpExt:TCPMD5Unexpected",
        &["TCP_MD5UNEXPECTED"],
        "ipv4/tcp.c tcp_inbound_md5_hash: LINUX_MIB_TCPMD5UNEXPECTED with TCP_MD5UNEXPECTED",
    ),
    c(
        "TcpExt:TCPMD5Failure",
        &["TCP_MD5FAILURE"],
        "ipv4/tcp.c tcp_inbound_md5_hash: LINUX_MIB_TCPMD5FAILURE with TCP_MD5FAILURE",
    ),
    c(
        "TcpExt:TCPAORequired",
        &["TCP_AONOTFOUND"],
        "ipv4/tcp.c tcp_inbound_hash: LINUX_MIB_TCPAOREQUIRED with TCP_AONOTFOUND",
    ),
    c(
        "TcpExt:TCPAOBad",
        &["TCP_AOFAILURE"],
        "ipv4/tcp_ao.c tcp_inbound_ao_hash: LINUX_MIB_TCPAOBAD with TCP_AOFAILURE",
    ),
    c(
        "TcpExt:TCPAOKeyNotFound",
        &["TCP_AOKEYNOTFOUND", "TCP_AOUNEXPECTED"],
        "ipv4/tcp_ao.c / tcp.c: LINUX_MIB_TCPAOKEYNOTFOUND with TCP_AOKEYNOTFOUND or TCP_AOUNEXPECTED",
    ),
    c(
        "TcpExt:IPReversePathFilter",
        &["IP_RPFILTER"],
        "ipv4/ip_input.c ip_rcv_finish_core: -EXDEV counts LINUX_MIB_IPRPFILTER and drops with IP_RPFILTER",
    ),
    c(
        "Ip:InHdrErrors",
        &["IP_INHDR"],
        "ipv4/ip_input.c ip_rcv_core and ipv4/ip_forward.c (TTL exceeded): IPSTATS_MIB_INHDRERRORS with IP_INHDR",
    ),
    c(
        "Ip:InCsumErrors",
        &["IP_CSUM"],
        "ipv4/ip_input.c ip_rcv_core csum_error: IPSTATS_MIB_CSUMERRORS with IP_CSUM",
    ),
    c(
        "Ip:InAddrErrors",
        &["IP_INADDRERRORS"],
        "ipv4/route.c ip_error: EHOSTUNREACH counts IPSTATS_MIB_INADDRERRORS with IP_INADDRERRORS",
    ),
    c(
        "Ip:InNoRoutes",
        &["IP_INNOROUTES"],
        "ipv4/route.c ip_error: ENETUNREACH counts IPSTATS_MIB_INNOROUTES with IP_INNOROUTES",
    ),
    c(
        "Ip:InUnknownProtos",
        &["IP_NOPROTO"],
        "ipv4/ip_input.c ip_protocol_deliver_rcu: IPSTATS_MIB_INUNKNOWNPROTOS with IP_NOPROTO",
    ),
    c(
        "IpExt:InTruncatedPkts",
        &["PKT_TOO_SMALL@ip_rcv_core"],
        "ipv4/ip_input.c ip_rcv_core: IPSTATS_MIB_INTRUNCATEDPKTS with PKT_TOO_SMALL",
    ),
    c(
        "Icmp:InCsumErrors",
        &["ICMP_CSUM"],
        "ipv4/icmp.c icmp_rcv csum_error: ICMP_MIB_CSUMERRORS with ICMP_CSUM",
    ),
    CounterMap {
        counter: "Softnet:Dropped",
        reasons: &["CPU_BACKLOG"],
        source: "core/dev.c enqueue_to_backlog: the per-CPU dropped count (2nd column of /proc/net/softnet_stat) with CPU_BACKLOG",
        scope: Scope::Global,
    },
    c(
        "Dev:*:RxDrop",
        &["CPU_BACKLOG", "UNHANDLED_PROTO"],
        "core/dev.c enqueue_to_backlog (CPU_BACKLOG) and __netif_receive_skb_core (UNHANDLED_PROTO) count the device's rx_dropped; drivers count their own drops there too (the drop column of /proc/net/dev: rx_dropped + rx_missed_errors)",
    ),
    c(
        "Dev:*:TxDrop",
        &[],
        "the device's tx_dropped (drivers and core/dev.c __dev_queue_xmit); freed with no reason or not freed as a drop",
    ),
];

/// The map entry of a counter name (`Dev:eth0:RxDrop` finds `Dev:*:RxDrop`).
pub fn lookup(counter: &str) -> Option<&'static CounterMap> {
    let pattern = match Counter::parse(counter) {
        Some(Counter::Dev { stat: "RxDrop", .. }) => "Dev:*:RxDrop",
        Some(Counter::Dev { stat: "TxDrop", .. }) => "Dev:*:TxDrop",
        Some(Counter::Dev { .. }) => return None,
        _ => counter,
    };
    BY_NAME.get(pattern).copied()
}

/// [`COUNTERS`] by name: a reading looks up every counter of every namespace it reads.
static BY_NAME: std::sync::LazyLock<std::collections::HashMap<&'static str, &'static CounterMap>> =
    std::sync::LazyLock::new(|| COUNTERS.iter().map(|m| (m.counter, m)).collect());

/// The reason name of a spec (`NO_SOCKET@__udp4_lib_rcv` → `NO_SOCKET`).
pub fn reason_name(spec: &str) -> &str {
    spec.split_once('@').map_or(spec, |(r, _)| r)
}

/// Whether a drop of `reason` at `location` (`function+0xoff [module]`) matches `spec`. Where
/// drops are not counted by location (`*`: grouped without it), a `REASON@function` spec
/// matches its reason wherever: the drops it covers are among them (what is then called
/// unseen stays a lower bound, never a drop the probe saw).
pub fn matches(spec: &str, reason: &str, location: &str) -> bool {
    match spec.split_once('@') {
        None => spec == reason,
        Some((r, _)) if location == "*" => r == reason,
        Some((r, func)) => {
            r == reason
                && location
                    .strip_prefix(func)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['+', ' ']))
        }
    }
}

/// The counters whose map lists `reason` (for `dropscope explain`).
pub fn counters_for(reason: &str) -> Vec<&'static str> {
    COUNTERS
        .iter()
        .filter(|m| m.reasons.iter().any(|s| reason_name(s) == reason))
        .map(|m| m.counter)
        .collect()
}
