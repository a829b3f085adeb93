//! The config's keys as the manual (`mesh-host-config(5)`) and the JSON Schema describe them:
//! a table apart from the reading (`read.rs`), which is the authority on what is accepted.

use super::DEFAULT_STATE_DIR;
use crate::model::fields::{FieldDoc, FieldType};

/// A tool's section (`pacman`, `systemctl`, `podman`), for the manual and the JSON Schema.
const TOOL: FieldType = FieldType::Object(&[
    FieldDoc {
        name: "command",
        ty: FieldType::Strings,
        default: Some("the tool's name, found in PATH"),
        about: "The program and the arguments put before the host's own, such as [\"pacman\", \
                \"--config\", \"/sandbox/pacman.conf\"].",
    },
    FieldDoc {
        name: "timeout_secs",
        ty: FieldType::Integer(1),
        default: Some("pacman 900, systemctl 120, podman 300"),
        about: "How long one run of the tool may take before it is stopped (pacman with SIGINT, \
                the others with SIGTERM).",
    },
    FieldDoc {
        name: "grace_secs",
        ty: FieldType::Integer(0),
        default: Some("pacman 300, systemctl 10, podman 30"),
        about: "How long a stopped tool has to exit before SIGKILL.",
    },
]);

/// Every key of the config, for the manual (`mesh-host-config(5)`) and the JSON Schema;
/// `RawConfig` is the authority, and the manual's tests check the two name the same keys.
pub const KEYS: &[FieldDoc] = &[
    FieldDoc {
        name: "$schema",
        ty: FieldType::String,
        default: Some("none"),
        about: "Ignored: the JSON Schema an editor checks the file with \
                (/usr/share/mesh-host/config.schema.json).",
    },
    FieldDoc {
        name: "state_dir",
        ty: FieldType::String,
        default: Some(DEFAULT_STATE_DIR),
        about: "The store, an absolute path (--state-dir overrides it).",
    },
    FieldDoc {
        name: "unit_name",
        ty: FieldType::String,
        default: Some("none"),
        about: "Another name the host's own unit goes by, refused to declarations as \
                mesh-host.service is.",
    },
    FieldDoc {
        name: "unit_dir",
        ty: FieldType::String,
        default: Some("/etc/systemd/system"),
        about: "Where declared unit files are written, an absolute path.",
    },
    FieldDoc {
        name: "max_file_bytes",
        ty: FieldType::Integer(0),
        default: Some("8388608 (8 MiB)"),
        about: "The largest content of a file or unit.",
    },
    FieldDoc {
        name: "max_declaration_bytes",
        ty: FieldType::Integer(0),
        default: Some("67108864 (64 MiB)"),
        about: "The largest declaration (or signed envelope).",
    },
    FieldDoc {
        name: "pacman",
        ty: TOOL,
        default: Some("pacman"),
        about: "How pacman is run.",
    },
    FieldDoc {
        name: "systemctl",
        ty: TOOL,
        default: Some("systemctl"),
        about: "How systemctl is run.",
    },
    FieldDoc {
        name: "podman",
        ty: TOOL,
        default: Some("podman"),
        about: "How podman is run.",
    },
    FieldDoc {
        name: "pacman_lock_wait_secs",
        ty: FieldType::Integer(0),
        default: Some("120"),
        about: "How long to wait for someone else's pacman lock (db.lck) before failing the \
                packages.",
    },
    FieldDoc {
        name: "pacman_remove_stale_lock",
        ty: FieldType::Bool,
        default: Some("false"),
        about: "Remove a db.lck no process holds and older than this boot, instead of failing \
                the packages as stale.",
    },
    FieldDoc {
        name: "disk_margin_mib",
        ty: FieldType::Integer(0),
        default: Some("256"),
        about: "Free space kept beyond what a transaction needs on pacman's cache and root: a \
                transaction that would eat into it is not started.",
    },
    FieldDoc {
        name: "cache_keep",
        ty: FieldType::Integer(1),
        default: Some("the cache is left to pacman"),
        about: "After a transaction, keep this many versions of each package in pacman's \
                cache (as paccache -rk N).",
    },
    FieldDoc {
        name: "interval_secs",
        ty: FieldType::Integer(1),
        default: Some("600"),
        about: "The service's drift timer (each wait randomised within 10%).",
    },
    FieldDoc {
        name: "watch",
        ty: FieldType::Bool,
        default: Some("true"),
        about: "Watch what the host owns with inotify and repair drift within about a second; \
                off, drift waits for the timer.",
    },
    FieldDoc {
        name: "heartbeat_secs",
        ty: FieldType::Integer(1),
        default: Some("30"),
        about: "The link sends a ping after this long without sending, and is dead after three \
                of these without a byte.",
    },
    FieldDoc {
        name: "link_down_degraded_secs",
        ty: FieldType::Integer(1),
        default: Some("900"),
        about: "How long the link may be down before `mesh-host status` says the host is \
                degraded (exit 6).",
    },
    FieldDoc {
        name: "reconnect_base_secs",
        ty: FieldType::Integer(1),
        default: Some("1"),
        about: "The first reconnect ceiling (full jitter, doubling to 5 minutes).",
    },
    FieldDoc {
        name: "max_frame_bytes",
        ty: FieldType::Integer(0),
        default: Some("2 x max_declaration_bytes + 64 KiB"),
        about: "The largest frame the link reads.",
    },
    FieldDoc {
        name: "outbox_max",
        ty: FieldType::Integer(0),
        default: Some("500"),
        about: "Reports kept while the link is down; the oldest are dropped past this.",
    },
    FieldDoc {
        name: "outbox_max_bytes",
        ty: FieldType::Integer(0),
        default: Some("67108864 (64 MiB)"),
        about: "The outbox's bound in bytes, beside its count.",
    },
    FieldDoc {
        name: "control_plane",
        ty: FieldType::Object(&[
            FieldDoc {
                name: "address",
                ty: FieldType::String,
                default: None,
                about: "host:port of the link.",
            },
            FieldDoc {
                name: "server_name",
                ty: FieldType::String,
                default: Some("the host part of address"),
                about: "The name the control plane's certificate must carry.",
            },
            FieldDoc {
                name: "ca_file",
                ty: FieldType::String,
                default: None,
                about: "The pinned CA (PEM), an absolute path; never the system's roots.",
            },
            FieldDoc {
                name: "node",
                ty: FieldType::String,
                default: None,
                about: "This node's name at the control plane.",
            },
            FieldDoc {
                name: "secret_file",
                ty: FieldType::String,
                default: None,
                about: "The file holding the node's secret, an absolute path.",
            },
        ]),
        default: Some("no control plane: the declaration in force is held on the timer alone"),
        about: "Where the control plane is and how the host proves itself; what mesh-host join \
                writes.",
    },
    FieldDoc {
        name: "metrics_file",
        ty: FieldType::String,
        default: Some("no metrics"),
        about: "Where to write Prometheus metrics (node_exporter's textfile collector), an \
                absolute file path.",
    },
    FieldDoc {
        name: "trusted_keys",
        ty: FieldType::Strings,
        default: Some("unsigned declarations are accepted"),
        about: "ed25519:BASE64 public keys: a declaration from the control plane is applied \
                only when signed by enough of them.",
    },
    FieldDoc {
        name: "signatures_required",
        ty: FieldType::Integer(1),
        default: Some("1 when trusted_keys are set"),
        about: "How many of trusted_keys must sign; never more than there are keys.",
    },
    FieldDoc {
        name: "generations",
        ty: FieldType::Integer(2),
        default: Some("5"),
        about: "How many declarations once in force the store keeps, for rollback and for \
                reverting one not confirmed in time.",
    },
    FieldDoc {
        name: "confirm_secs",
        ty: FieldType::Integer(0),
        default: Some("300"),
        about: "How long a declaration from the control plane stays pending: unless the \
                control plane acks the report of the run that applied it within this, the host \
                reverts it (0: never).",
    },
];
