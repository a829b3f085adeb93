//! podman: the arguments the containers kind runs it with, and a pure parser of `podman ps`'s
//! JSON into typed records. Declared values reach podman bound to their option (`--publish=P`)
//! or after `--`, never as an option of their own.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::words;

/// How long `stop` and `rm -f` give a container to exit before podman kills it.
const STOP_SECONDS: &str = "10";

/// `ps -a --format json`: every container, running or not (`parse_ps`).
pub fn ps() -> Vec<String> {
    ["ps", "-a", "--format", "json"].map(String::from).into()
}

pub fn start() -> Vec<String> {
    vec!["start".into()]
}

pub fn stop() -> Vec<String> {
    ["stop", "-t", STOP_SECONDS].map(String::from).into()
}

pub fn unpause() -> Vec<String> {
    vec!["unpause".into()]
}

/// Removes containers, stopping running ones first.
pub fn remove() -> Vec<String> {
    ["rm", "-f", "-t", STOP_SECONDS].map(String::from).into()
}

/// One container to create.
#[derive(Debug)]
pub struct Create<'a> {
    pub name: &'a str,
    pub labels: &'a [(&'a str, &'a str)],
    pub ports: &'a [String],
    pub volumes: &'a [String],
    pub network: Option<&'a str>,
    /// `--init`: an init process as PID 1 that forwards signals and reaps children.
    pub init: bool,
    /// `--env-file`: its environment, from a file, so no value of it reaches an argv.
    pub env_file: Option<&'a str>,
    pub image: &'a str,
    pub command: &'a [String],
}

impl Create<'_> {
    /// The options of `podman create`, every value bound to its option.
    pub fn options(&self) -> Vec<String> {
        let mut args = vec!["create".to_string(), format!("--name={}", self.name)];
        args.extend(self.labels.iter().map(|(k, v)| format!("--label={k}={v}")));
        args.extend(self.ports.iter().map(|p| format!("--publish={p}")));
        args.extend(self.volumes.iter().map(|v| format!("--volume={v}")));
        if let Some(n) = self.network {
            args.push(format!("--network={n}"));
        }
        if self.init {
            args.push("--init".into());
        }
        if let Some(file) = self.env_file {
            args.push(format!("--env-file={file}"));
        }
        args
    }

    /// What goes after `--`: the image, then the command.
    pub fn positional(&self) -> Vec<&str> {
        std::iter::once(self.image)
            .chain(self.command.iter().map(String::as_str))
            .collect()
    }
}

words! {
    /// A container's `State`.
    State {
        Created = "created",
        Running = "running",
        Paused = "paused",
        Stopping = "stopping",
        Exited = "exited",
        Stopped = "stopped",
        Removing = "removing",
        Configured = "configured",
        Initialized = "initialized",
    }
}

/// One container as `podman ps` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Container {
    pub names: Vec<String>,
    pub state: State,
    /// Empty when it has none (podman prints `null`).
    pub labels: BTreeMap<String, String>,
}

/// `podman ps --format json` as printed: only the fields mesh-host reads.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PsEntry {
    names: Vec<String>,
    state: String,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

/// `podman ps -a --format json` output.
pub fn parse_ps(stdout: &[u8]) -> Result<Vec<Container>, serde_json::Error> {
    let entries: Vec<PsEntry> = serde_json::from_slice(stdout)?;
    Ok(entries
        .into_iter()
        .map(|entry| Container {
            names: entry.names,
            state: State::parse(&entry.state),
            labels: entry.labels.unwrap_or_default(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{assert_recorded, generations};

    #[test]
    fn parses_saved_podman_ps() {
        for g in generations("podman") {
            for fixture in [&g.read("podman-ps.cmd"), &g.read("podman-ps-empty.cmd")] {
                assert_recorded(fixture, &["podman"], &ps(), &[]);
            }
            let all = parse_ps(g.read("podman-ps.json").as_bytes()).unwrap();
            let labels = BTreeMap::from([
                ("mesh-host.owned".to_string(), "1".to_string()),
                ("mesh-host.spec".to_string(), "abc123".to_string()),
            ]);
            // `Labels: null` for the one without. The one that exited says `exited`, or
            // `stopped` (podman 5 was seen saying so right after the exit, before its cleanup):
            // neither is running.
            let exited = match all.get(1).map(|c| &c.state) {
                Some(State::Stopped) => State::Stopped,
                _ => State::Exited,
            };
            assert_eq!(
                all,
                [
                    Container {
                        names: vec!["mesh-fix-running".into()],
                        state: State::Running,
                        labels,
                    },
                    Container {
                        names: vec!["mesh-fix-exited".into()],
                        state: exited,
                        labels: BTreeMap::new(),
                    },
                ],
                "{}",
                g.name
            );
            let empty = parse_ps(g.read("podman-ps-empty.json").as_bytes()).unwrap();
            assert!(empty.is_empty());
            assert!(parse_ps(b"garbage").is_err());
        }
    }

    #[test]
    fn create_binds_values_to_options() {
        let command = ["--rm".to_string()];
        let ports = ["8080:80".to_string()];
        let create = Create {
            name: "web",
            labels: &[("mesh-host.owned", "1")],
            ports: &ports,
            volumes: &[],
            network: Some("host"),
            init: true,
            env_file: Some("/var/lib/mesh-host/env/web"),
            image: "img",
            command: &command,
        };
        assert_eq!(
            create.options(),
            [
                "create",
                "--name=web",
                "--label=mesh-host.owned=1",
                "--publish=8080:80",
                "--network=host",
                "--init",
                "--env-file=/var/lib/mesh-host/env/web"
            ]
        );
        assert_eq!(create.positional(), ["img", "--rm"]);
    }
}
