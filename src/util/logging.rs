//! Logging: env_logger on stderr. When stderr is the journal (systemd passes its device and inode
//! in `JOURNAL_STREAM`), every line starts with the sd-daemon priority prefix, so journald stores
//! errors at `err` and warnings at `warning`, and a message of several lines stays one entry.

use std::io::Write;

/// Sets up the global logger at `level` unless `RUST_LOG` says otherwise: the service (`run`) logs
/// at info, so the journal shows when each run started and how it ended; one-shot commands warn
/// (`-q`: only errors).
pub fn init(level: log::LevelFilter) {
    let default = level.as_str().to_ascii_lowercase();
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default));
    if stderr_is_journal() {
        builder.format(|out, record| {
            writeln!(
                out,
                "{}",
                journal_line(record.level(), &record.args().to_string())
            )
        });
    } else {
        builder.format_timestamp(None);
    }
    builder.init();
}

/// Whether fd 2 is the stream systemd connected to the journal: `JOURNAL_STREAM` is inherited by
/// children too, so it counts only while stderr is still that very file.
fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    // Through a duplicate of fd 2 (std's stderr), so the check is safe code.
    let Ok(stderr) = std::os::fd::AsFd::as_fd(&std::io::stderr()).try_clone_to_owned() else {
        return false;
    };
    let Ok(stat) = std::fs::File::from(stderr).metadata() else {
        return false;
    };
    use std::os::unix::fs::MetadataExt;
    value.to_str() == Some(&format!("{}:{}", stat.dev(), stat.ino()))
}

/// One journal line: the sd-daemon prefix (`<3>` err, `<4>` warning, `<6>` info, `<7>` debug)
/// and the message with its line breaks written as `\n`, because journald ends an entry at each
/// newline of the stream.
fn journal_line(level: log::Level, message: &str) -> String {
    let priority = match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    };
    format!(
        "<{priority}>{}",
        message.trim_end_matches('\n').replace('\n', "\\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::Level;

    #[test]
    fn each_level_gets_its_sd_daemon_priority() {
        for (level, line) in [
            (Level::Error, "<3>run failed"),
            (Level::Warn, "<4>run failed"),
            (Level::Info, "<6>run failed"),
            (Level::Debug, "<7>run failed"),
            (Level::Trace, "<7>run failed"),
        ] {
            assert_eq!(journal_line(level, "run failed"), line);
        }
    }

    #[test]
    fn a_message_of_several_lines_stays_one_line() {
        assert_eq!(
            journal_line(
                Level::Error,
                "pacman -S x: exit 1\nerror: target not found: x\n"
            ),
            "<3>pacman -S x: exit 1\\nerror: target not found: x"
        );
    }
}
