//! What mesh-host asks of its external tools, one module per tool (zincati's `rpm_ostree/` is the
//! model): argument builders, which give the options that go before `--` (`exec::Runner` runs
//! them and puts the names a call acts on after `--`), and pure parsers of captured output into
//! types. Nothing here spawns or reads the system; the kinds decide what to run and in which order.

pub mod pacman;
pub mod podman;
pub mod systemctl;

/// An enum of the words a tool prints for a state, with `Other` for a word this version of
/// mesh-host does not know (a newer tool may add some): parsing never fails, and an unknown word
/// is kept as printed.
macro_rules! words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $word:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
            /// A word not listed here, as printed.
            Other(String),
        }

        impl $name {
            pub fn parse(word: &str) -> $name {
                match word {
                    $($word => $name::$variant,)*
                    other => $name::Other(other.to_string()),
                }
            }

            /// The word as the tool prints it.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $word,)*
                    $name::Other(word) => word,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use words;

/// Ties a saved fixture to the builder that makes its command today: `recorded` is its `.cmd`
/// file (`LC_ALL=C`, the tool as the sandbox configures it, the arguments), and the builder's
/// `args` with `names` after `--` must make that same line.
#[cfg(test)]
pub fn assert_recorded(recorded: &str, tool: &[&str], args: &[String], names: &[&str]) {
    let tool = crate::os::exec::Tool {
        command: tool.iter().map(|s| s.to_string()).collect(),
        timeout: std::time::Duration::from_secs(1),
        stop: crate::os::exec::Stop::Terminate,
        grace: std::time::Duration::from_secs(1),
    };
    let made = format!(
        "LC_ALL=C {}",
        crate::os::exec::command_line(&tool, args, names)
    );
    assert_eq!(
        made,
        recorded.trim_end(),
        "the fixture's command is not the builder's"
    );
}

/// One generation of a tool's saved output: `tests/fixtures/TOOL-VERSION/` (`pacman-7.1.0`).
#[cfg(test)]
pub struct Generation {
    pub name: String,
    dir: std::path::PathBuf,
}

#[cfg(test)]
impl Generation {
    /// A fixture of this generation, read as the test runs.
    pub fn read(&self, file: &str) -> String {
        let path = self.dir.join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}

/// Every generation of `tool`'s fixtures (`pacman`, `systemd`, `podman`), oldest first: each
/// parser test walks them all, so a capture of a new version is tested by adding its directory.
#[cfg(test)]
pub fn generations(tool: &str) -> Vec<Generation> {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let prefix = format!("{tool}-");
    let mut found: Vec<(Vec<u32>, Generation)> = std::fs::read_dir(&fixtures)
        .unwrap_or_else(|e| panic!("{}: {e}", fixtures.display()))
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version = name.strip_prefix(&prefix)?;
            let numbers = version
                .split('.')
                .map(|n| n.parse().ok())
                .collect::<Option<_>>()?;
            Some((
                numbers,
                Generation {
                    name,
                    dir: entry.path(),
                },
            ))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let found: Vec<Generation> = found.into_iter().map(|(_, g)| g).collect();
    assert!(
        found.len() >= 2,
        "{tool}: fewer than two generations in {}",
        fixtures.display()
    );
    found
}
