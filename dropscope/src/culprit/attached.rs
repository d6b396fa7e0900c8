//! A BPF program attached to a device, as a reading of the kernel finds it: the reading's
//! part (what the model keeps), named as the user reads it.
use serde::{Deserialize, Serialize};

/// A BPF program attached to a device, as a reading found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attached {
    /// The device (escaped as counter names are).
    pub device: String,
    /// Where on it: `xdpdrv`, `xdpgeneric`, `xdpoffload`, `ingress`, `egress` (clsact),
    /// `tcx-ingress`, `tcx-egress`, `netkit-primary`, `netkit-peer`.
    pub hook: String,
    /// The program's id.
    pub prog: u32,
    /// Its name (escaped; empty where it could not be read).
    pub name: String,
    /// A clsact (or ingress qdisc) filter's priority and handle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<TcFilter>,
}

/// A tc filter's priority and handle, which name it exactly (`tc filter del ... pref P handle
/// H bpf`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TcFilter {
    /// Its priority (`pref`).
    pub pref: u16,
    /// Its handle.
    pub handle: u32,
}

impl TcFilter {
    /// The handle as `tc filter show` prints a `bpf` filter's: `0x1`.
    pub fn handle_text(self) -> String {
        format!("{:#x}", self.handle)
    }
}

impl Attached {
    /// `prog NAME#ID`.
    pub fn program(&self) -> String {
        let name = if self.name.is_empty() {
            "?"
        } else {
            &self.name
        };
        format!("prog {name}#{}", self.prog)
    }

    /// Where, as a user reads it: `veth0 tc ingress (clsact)`, `veth0 xdp (driver)`.
    pub fn attach(&self) -> String {
        let at = match self.hook.as_str() {
            "xdpdrv" => "xdp (driver)",
            "xdpgeneric" => "xdp (generic)",
            "xdpoffload" => "xdp (offload)",
            "ingress" => "tc ingress (clsact filter)",
            "egress" => "tc egress (clsact filter)",
            "tcx-ingress" => "tc ingress (tcx)",
            "tcx-egress" => "tc egress (tcx)",
            other => other,
        };
        format!("{} {at}", self.device)
    }
}
